# bench/make.mk — included by the root Makefile.
# The compare harness runs through the real `basalt` binary, so the Basalt side of every
# report is the Basalt engine (`basalt bench`), beside RocksDB db_bench and fio.
BASALT_BIN := $(or $(CARGO_TARGET_DIR),target)/release/basalt
BENCH_RESULTS := bench/results/$(shell date -u +%Y-%m-%d)-$(shell hostname)

.PHONY: test-bench bench-standard basalt-bin
TEST_TARGETS += test-bench
BENCH_TARGETS += bench-standard

basalt-bin:
	$(CARGO) build --release -p basalt-appliance --bin basalt

## test-bench: quick compare suite end to end (Basalt vs db_bench vs fio), TSV checked
test-bench: basalt-bin
	rm -rf $(or $(TMPDIR),/tmp)/basalt-bench-quick
	$(BASALT_BIN) bench compare --suite quick --out $(or $(TMPDIR),/tmp)/basalt-bench-quick
	bench/scripts/check-summary-tsv.sh $(or $(TMPDIR),/tmp)/basalt-bench-quick/summary.tsv

## bench-standard: the standard suite; report under bench/results/<date>-<host>/
bench-standard: basalt-bin
	mkdir -p $(BENCH_RESULTS)
	$(BASALT_BIN) bench compare --suite standard --out $(BENCH_RESULTS) --db-dir $(BENCH_RESULTS)/data
	rm -rf $(BENCH_RESULTS)/data
