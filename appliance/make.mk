# appliance/make.mk — the `basalt` binary: Debian package and its tests (included by the root Makefile).
APPLIANCE_TARGET := $(or $(CARGO_TARGET_DIR),target)
APPLIANCE_BIN := $(APPLIANCE_TARGET)/release/basalt
APPLIANCE_ASSETS := $(APPLIANCE_TARGET)/release/deb-assets
BASALT_TOOLS ?= /var/cache/basalt-tools
CARGO_DEB := $(BASALT_TOOLS)/bin/cargo-deb
CARGO_DEB_VERSION := 3.8.0

.PHONY: deb appliance-bin cargo-deb test-appliance appliance-deb-test appliance-run-smoke
TEST_TARGETS += test-appliance

appliance-bin:
	$(CARGO) build --release -p basalt-appliance --bin basalt

## cargo-deb: install cargo-deb (crates.io) into $(BASALT_TOOLS) once
cargo-deb: $(CARGO_DEB)
$(CARGO_DEB):
	$(CARGO) install cargo-deb --version $(CARGO_DEB_VERSION) --locked --root $(BASALT_TOOLS)

## deb: target/debian/basalt_<version>_amd64.deb (binary, unit, config, man pages, completions)
deb: appliance-bin $(CARGO_DEB)
	rm -rf $(APPLIANCE_ASSETS)
	mkdir -p $(APPLIANCE_ASSETS)/completions
	$(APPLIANCE_BIN) man --out $(APPLIANCE_ASSETS)/man >/dev/null
	gzip -9n $(APPLIANCE_ASSETS)/man/*.1
	$(APPLIANCE_BIN) completions bash >$(APPLIANCE_ASSETS)/completions/basalt
	$(APPLIANCE_BIN) completions zsh >$(APPLIANCE_ASSETS)/completions/_basalt
	$(APPLIANCE_BIN) completions fish >$(APPLIANCE_ASSETS)/completions/basalt.fish
	$(CARGO_DEB) -p basalt-appliance --no-build
	@ls -l $(APPLIANCE_TARGET)/debian/basalt_*_amd64.deb

APPLIANCE_DISTROS := debian12 ubuntu22.04 ubuntu24.04

## appliance-deb-test: install the .deb in systemd-nspawn containers of Debian 12, Ubuntu 22.04 and 24.04 (root)
appliance-deb-test: deb
	set -e; deb=$(APPLIANCE_TARGET)/debian/basalt_$$($(APPLIANCE_BIN) --version | cut -d' ' -f2)_amd64.deb; \
	for d in $(APPLIANCE_DISTROS); do appliance/tests/deb-install-test --distro $$d $$deb; done

## appliance-run-smoke: what `make run` runs reaches a mounted, serving state and stops cleanly
appliance-run-smoke: appliance-bin
	appliance/tests/run-smoke-test $(APPLIANCE_BIN)

## test-appliance: the .deb build and container install test, then the `make run` smoke test
test-appliance: appliance-deb-test appliance-run-smoke
