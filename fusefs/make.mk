# fusefs: pjdfstest + fsx against a real mount (root, /dev/fuse), and the
# benchmarks against ext4 on the same disk.
TEST_TARGETS += test-fusefs
BENCH_TARGETS += bench-fusefs

.PHONY: test-fusefs bench-fusefs
## test-fusefs: pjdfstest (compared with ext4 case by case) and fsx on a Basalt mount
test-fusefs:
	./fusefs/scripts/test-fusefs.sh

## bench-fusefs: fio (incl. synced 4k writes), file creation, untar/find/du on Basalt vs ext4 (ratios)
bench-fusefs:
	./fusefs/scripts/bench-fusefs.sh
