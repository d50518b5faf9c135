# Engine targets beyond `cargo test`: long crash soak and fuzzing (under `make bench`).

ENGINE_CRASH_CYCLES ?= 3000
ENGINE_FUZZ_SECONDS ?= 60
BASALT_TOOLS ?= /var/cache/basalt-tools

BENCH_TARGETS += bench-engine
.PHONY: bench-engine engine-crash-soak fuzz-engine bench-read-path

## engine-crash-soak: the kill -9 harness with many more cycles than CI runs
engine-crash-soak:
	BASALT_CRASH_CYCLES=$(ENGINE_CRASH_CYCLES) $(CARGO) test --release -p basalt-engine --test crash -- --nocapture

## fuzz-engine: every on-disk decoder under libFuzzer (needs the nightly toolchain)
fuzz-engine:
	@test -x $(BASALT_TOOLS)/bin/cargo-fuzz || $(CARGO) install cargo-fuzz --root $(BASALT_TOOLS)
	cd engine && for t in log_block segment_footer index_block checkpoint delete_list paged_head; do \
	  PATH=$(BASALT_TOOLS)/bin:$$PATH cargo +nightly fuzz run $$t -- -max_total_time=$(ENGINE_FUZZ_SECONDS) || exit 1; \
	done

## bench-read-path: issue #3's comparison: readrandom and multireadrandom at 20x the
## memory budget against fio (QD1 / QD32) and db_bench, interleaved rounds, median ratios
bench-read-path:
	./engine/scripts/bench-read-path.sh

bench-engine: engine-crash-soak fuzz-engine bench-read-path
