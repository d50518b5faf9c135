# bench/make.mk — included by the root Makefile.
BENCH_BIN := $(or $(CARGO_TARGET_DIR),target)/release/basalt-bench-mem
BENCH_RESULTS := bench/results/$(shell date -u +%Y-%m-%d)-$(shell hostname)

.PHONY: test-bench bench-standard bench-bin
TEST_TARGETS += test-bench
BENCH_TARGETS += bench-standard

bench-bin:
	$(CARGO) build --release -p basalt-bench --bin basalt-bench-mem

## test-bench: quick compare suite end to end (memtest vs db_bench vs fio), TSV checked
test-bench: bench-bin
	rm -rf $(or $(TMPDIR),/tmp)/basalt-bench-quick
	$(BENCH_BIN) compare --suite quick --out $(or $(TMPDIR),/tmp)/basalt-bench-quick
	bench/scripts/check-summary-tsv.sh $(or $(TMPDIR),/tmp)/basalt-bench-quick/summary.tsv

## bench-standard: the standard suite; report under bench/results/<date>-<host>/
bench-standard: bench-bin
	mkdir -p $(BENCH_RESULTS)
	$(BENCH_BIN) compare --suite standard --out $(BENCH_RESULTS) --db-dir $(BENCH_RESULTS)/data $(if $(BASALT_CMD),--basalt-cmd "$(BASALT_CMD)")
	rm -rf $(BENCH_RESULTS)/data
