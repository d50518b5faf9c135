# fusefs: pjdfstest + fsx against a real mount (root, /dev/fuse), and the
# benchmarks against ext4 on the same disk.
TEST_TARGETS += test-fusefs
BENCH_TARGETS += bench-fusefs bench-ring

.PHONY: test-fusefs bench-fusefs bench-ring
## test-fusefs: pjdfstest (compared with ext4 case by case) and fsx on a Basalt mount
test-fusefs:
	./fusefs/scripts/test-fusefs.sh

## bench-fusefs: fio (incl. synced 4k writes), file creation, untar/find/du on Basalt vs ext4 (ratios), with the FUSE ceiling
bench-fusefs:
	./fusefs/scripts/bench-fusefs.sh

## bench-ring: the null filesystem over /dev/fuse vs over io_uring (thread on the requesting CPU or the next)
bench-ring:
	./fusefs/scripts/bench-ring.sh
