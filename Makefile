# Basalt: the two commands are `make run` and `make test` (see README.md).
#
# Each top-level folder may add its own targets in `<folder>/make.mk`; it appends
# its test target to TEST_TARGETS and its benchmark target to BENCH_TARGETS.
# Debian packages each folder needs are listed in `<folder>/debian-packages.txt`
# and installed (only those missing) by `make deps`.

SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

TEST_TARGETS :=
BENCH_TARGETS :=

.PHONY: all build run test bench deps fmt lint test-rust clean
all: build

# `make run` flags for `basalt up` (e.g. make run BASALT_UP_ARGS='--listen 0.0.0.0:8642').
BASALT_UP_ARGS ?=

include $(wildcard */make.mk)

## deps: install the Debian packages every part needs (only the missing ones)
deps:
	./scripts/install-system-deps

## build: release build of the whole workspace
build:
	$(CARGO) build --release --workspace

## run: build, then mount ./mnt over the data in ./basalt-data and serve the dashboard
## on http://127.0.0.1:8642 (foreground; Ctrl-C unmounts cleanly and syncs)
run: build
	$(or $(CARGO_TARGET_DIR),target)/release/basalt up $(BASALT_UP_ARGS)

## fmt: format all Rust code
fmt:
	$(CARGO) fmt --all

## lint: rustfmt check and clippy with warnings as errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## test-rust: every crate's unit, model, crash and integration tests
test-rust:
	$(CARGO) test --workspace --release

## test: install what is missing, then lint and run every test suite
test: deps
	$(MAKE) lint
	$(MAKE) test-rust
	$(if $(strip $(TEST_TARGETS)),$(MAKE) $(TEST_TARGETS))

## bench: long soaks and the standard benchmark suites
bench: deps build
	$(if $(strip $(BENCH_TARGETS)),$(MAKE) $(BENCH_TARGETS))

clean:
	$(CARGO) clean
