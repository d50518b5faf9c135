# fusefs: pjdfstest + fsx against a real mount (root, /dev/fuse), and the
# benchmarks against ext4 on the same disk.
TEST_TARGETS += test-fusefs test-postgres test-bench-fusefs
BENCH_TARGETS += bench-fusefs latency-fusefs bench-ring bench-options

.PHONY: test-fusefs test-postgres test-bench-fusefs bench-fusefs latency-fusefs bench-ring bench-options
## test-fusefs: pjdfstest (compared with ext4 case by case) and fsx on a Basalt mount
test-fusefs:
	./fusefs/scripts/test-fusefs.sh

## test-postgres: PostgreSQL on a Basalt mount, the FUSE daemon killed under pgbench and a committer (3 rounds): recovery, every acknowledged commit, balances, amcheck, checksums
test-postgres:
	./fusefs/scripts/test-postgres.sh

## test-bench-fusefs: the bench-fusefs harness (two rounds) and the latency split at toy sizes: every measure reported as it says
test-bench-fusefs:
	./fusefs/scripts/test-bench-fusefs.sh

## bench-fusefs: fio (incl. synced 4k writes), file creation, untar/find/du on Basalt vs ext4 (ratios), with the FUSE ceiling
bench-fusefs:
	./fusefs/scripts/bench-fusefs.sh

## latency-fusefs: where a 4 KiB random read's time goes (fio qd1 and qd16): FUSE queue to reply, device time and depth, from kernel tracepoints
latency-fusefs:
	./fusefs/scripts/latency-split.sh

## bench-ring: the null filesystem over /dev/fuse vs over io_uring (thread on the requesting CPU or the next)
bench-ring:
	./fusefs/scripts/bench-ring.sh

## bench-options: each performance choice of the mount (writeback cache, max_write, readahead, workers, readdirplus, cache timeouts) against the mount without it, with the FUSE requests and engine commits each costs
bench-options:
	./fusefs/scripts/bench-options.sh
