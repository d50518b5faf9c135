# basalt-monitoring: dashboard browser test (headless Chromium via playwright-core) and a
# `promtool check metrics` of /metrics served from replayed fixtures. Rust tests run via
# `cargo test --workspace --release` from the root Makefile.

MONITORING_BROWSER_DIR := monitoring/tests/browser
MONITORING_SERVE_BIN = $(or $(CARGO_TARGET_DIR),target)/release/examples/serve_fixtures

.PHONY: test-monitoring monitoring-node monitoring-serve-bin monitoring-browser-test monitoring-promtool
TEST_TARGETS += test-monitoring

test-monitoring: monitoring-browser-test monitoring-promtool

monitoring-node:
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  echo "node/npm missing: installing Debian's nodejs and npm"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends nodejs npm; }

monitoring-serve-bin:
	$(CARGO) build --release -p basalt-monitoring --example serve_fixtures

monitoring-browser-test: monitoring-node monitoring-serve-bin
	cd $(MONITORING_BROWSER_DIR) && npm ci --no-audit --no-fund
	cd $(MONITORING_BROWSER_DIR) && SERVE_FIXTURES_BIN="$(abspath $(MONITORING_SERVE_BIN))" npm test
	@echo "screenshot: $(MONITORING_BROWSER_DIR)/artifacts/dashboard.png"

monitoring-promtool: monitoring-serve-bin
	./monitoring/scripts/check-metrics "$(abspath $(MONITORING_SERVE_BIN))"
