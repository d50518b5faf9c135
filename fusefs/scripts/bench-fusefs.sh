#!/usr/bin/env bash
# Basalt mount vs ext4 on the same disk: fio sequential write/read (1 MiB blocks,
# end_fsync), fio 4 KiB random reads with O_DIRECT at iodepth 1 and 16,
# 4 KiB random writes each followed by fdatasync (a database's page writes) with the
# device bytes each costs, create/stat/delete of many 4 KiB files with 8 threads, untar
# of a source tree then find and du. Prints one line per measure with both results and
# the ratio; for the measures bound by FUSE round trips (random reads, file creation,
# stat, delete, the source tree) also the null filesystem's result: the ceiling of any
# FUSE filesystem on this machine (ARCHITECTURE.md, "The FUSE ceiling"). Env: BENCH_DIR (default /var/tmp, must be on the disk to compare),
# BENCH_SIZE (default 4g), BENCH_FILES (default 100000), BENCH_CHUNK (chunk size,
# default the crate's), BENCH_OPTS (extra -o options for the mount, e.g. io_uring), BENCH_RUNTIME
# (seconds of each random-read and synced-write run, default 20).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! [ -c /dev/fuse ]; then echo "bench-fusefs: SKIPPED: needs root and /dev/fuse"; exit 0; fi
command -v fio >/dev/null || { echo "bench-fusefs: fio missing (make deps)"; exit 1; }
SIZE=${BENCH_SIZE:-4g}
FILES=${BENCH_FILES:-100000}
RUNTIME=${BENCH_RUNTIME:-20}
BASE=${BENCH_DIR:-/var/tmp}
cargo build --release -p basalt-fusefs --bin basalt-fusefs-dev >&2
TARGET=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
DEV="$TARGET/release/basalt-fusefs-dev"
WORK=$(mktemp -d "$BASE/basalt-fusefs-bench.XXXXXX")
DEVPID=""
NULLPID=""
source scripts/fuse-uring-switch.sh
cleanup() {
  set +e
  fuse_uring_restore
  if [ -n "$DEVPID" ] && kill -0 "$DEVPID" 2>/dev/null; then kill "$DEVPID"; wait "$DEVPID"; fi
  if [ -n "$NULLPID" ] && kill -0 "$NULLPID" 2>/dev/null; then kill "$NULLPID"; wait "$NULLPID"; fi
  mountpoint -q "$WORK/mnt" && fusermount3 -u -z "$WORK/mnt"
  mountpoint -q "$WORK/null" && fusermount3 -u -z "$WORK/null"
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt" "$WORK/ext4/c"
EXTRA=()
[ -n "${BENCH_CHUNK:-}" ] && EXTRA+=(--chunk-size "$BENCH_CHUNK")
[ -n "${BENCH_OPTS:-}" ] && EXTRA+=(-o "$BENCH_OPTS")
# -o io_uring needs the kernel's switch on for the run (put back at exit).
case "${BENCH_OPTS:-}" in *io_uring*) fuse_uring_set Y ;; esac
"$DEV" mount --data "$WORK/data" "${EXTRA[@]}" "$WORK/mnt" >"$WORK/dev.log" 2>&1 &
DEVPID=$!
for _ in $(seq 200); do mountpoint -q "$WORK/mnt" && break; sleep 0.05; done
mountpoint -q "$WORK/mnt" || { cat "$WORK/dev.log"; exit 1; }
mkdir "$WORK/mnt/c"
# The null filesystem (no storage work, FUSE only) beside it: the ceiling of any FUSE
# filesystem for the round-trip-bound measures. It keeps data in memory (files of at
# most 1 GiB), so it runs the random reads on a 1 GiB file and no sequential or
# synced-write runs.
mkdir -p "$WORK/null"
NULL_OPTS=()
case "${BENCH_OPTS:-}" in *io_uring*) NULL_OPTS=(-o "$BENCH_OPTS") ;; esac # the same transport
"$DEV" nullfs "${NULL_OPTS[@]}" "$WORK/null" >"$WORK/null.log" 2>&1 &
NULLPID=$!
for _ in $(seq 200); do mountpoint -q "$WORK/null" && break; sleep 0.05; done
mountpoint -q "$WORK/null" || { cat "$WORK/null.log"; exit 1; }
mkdir "$WORK/null/c"

drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
# fio JSON -> MiB/s or IOPS of one direction.
fio_bw() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); d=j["jobs"][0][sys.argv[2]]; print(round(d["bw"]/1024,1))' "$1" "$2"; }
fio_iops() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(round(j["jobs"][0][sys.argv[2] if len(sys.argv) > 2 else "read"]["iops"]))' "$@"; }
fio_ios() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["jobs"][0]["write"]["total_ios"])' "$1"; }
# Bytes written so far to the block device holding $BASE (/proc/diskstats, 512-byte sectors).
DEVBLK=$(basename "$(readlink -f "/sys/dev/block/$(findmnt -n -o MAJ:MIN -T "$BASE" | tr -d ' ')")")
written() { awk -v d="$DEVBLK" '$3==d{printf "%.0f\n", $10*512}' /proc/diskstats; }
ratio() { python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f"{a/b:.2f}" if b else "n/a")' "$1" "$2"; }
report() { printf '%-34s basalt %10s  ext4 %10s  ratio %s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
# With the null filesystem's result $4: the FUSE ceiling and its ratio to ext4.
report_ceiling() {
  printf '%-34s basalt %10s  ext4 %10s  ratio %s  | FUSE ceiling %10s  ratio %s\n' \
    "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4" "$(ratio "$4" "$3")"
}

for fs in basalt ext4 null; do
  case $fs in basalt) d="$WORK/mnt/c" ;; ext4) d="$WORK/ext4/c" ;; null) d="$WORK/null/c" ;; esac
  size=$SIZE
  if [ $fs = null ]; then
    size=1g
    fio --name=seqw --directory="$d" --filename=seq --rw=write --bs=1M --size=$size --output-format=json >/dev/null
  else
    drop
    fio --name=seqw --directory="$d" --filename=seq --rw=write --bs=1M --size="$SIZE" --end_fsync=1 --output-format=json >"$WORK/$fs.seqw.json"
    drop
    fio --name=seqr --directory="$d" --filename=seq --rw=read --bs=1M --size="$SIZE" --output-format=json >"$WORK/$fs.seqr.json"
  fi
  for qd in 1 16; do
    drop
    fio --name=randr --directory="$d" --filename=seq --rw=randread --bs=4k --size=$size --direct=1 \
      --ioengine=libaio --iodepth=$qd --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/$fs.rr$qd.json"
  done
  if [ $fs != null ]; then
    drop
    w0=$(written)
    fio --name=syncw --directory="$d" --filename=seq --rw=randwrite --bs=4k --size="$SIZE" --fdatasync=1 \
      --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/$fs.syncw.json"
    sync -f "$d"
    echo $(( $(written) - w0 )) >"$WORK/$fs.syncw.bytes"
  fi
  rm -f "$d/seq"
  "$DEV" files --dir "$d/files" --count "$FILES" --threads 8 --size 4096 >"$WORK/$fs.files"
  drop
  mkdir -p "$d/src"
  s=$(date +%s.%N)
  tar -C "$d/src" -xf "$WORK/src.tar" 2>/dev/null || { tar -C "$HOME/.cargo/registry" -cf "$WORK/src.tar" src; s=$(date +%s.%N); tar -C "$d/src" -xf "$WORK/src.tar"; }
  sync -f "$d/src"
  e=$(date +%s.%N); echo "untar $(python3 -c "print($e-$s)")" >"$WORK/$fs.tree"
  drop
  s=$(date +%s.%N); find "$d/src" >/dev/null; e=$(date +%s.%N); echo "find $(python3 -c "print($e-$s)")" >>"$WORK/$fs.tree"
  s=$(date +%s.%N); du -s "$d/src" >/dev/null; e=$(date +%s.%N); echo "du $(python3 -c "print($e-$s)")" >>"$WORK/$fs.tree"
  rm -rf "$d/src" "$d/files"
done

echo "bench-fusefs: size $SIZE, $FILES files, $(nproc) cores, dir $BASE"
report "fio seq write 1M end_fsync MiB/s" "$(fio_bw "$WORK/basalt.seqw.json" write)" "$(fio_bw "$WORK/ext4.seqw.json" write)"
report "fio seq read 1M MiB/s" "$(fio_bw "$WORK/basalt.seqr.json" read)" "$(fio_bw "$WORK/ext4.seqr.json" read)"
for qd in 1 16; do
  report_ceiling "fio randread 4k direct qd$qd IOPS" "$(fio_iops "$WORK/basalt.rr$qd.json")" \
    "$(fio_iops "$WORK/ext4.rr$qd.json")" "$(fio_iops "$WORK/null.rr$qd.json")"
done
report "fio randwrite 4k fdatasync IOPS" "$(fio_iops "$WORK/basalt.syncw.json" write)" "$(fio_iops "$WORK/ext4.syncw.json" write)"
# Device KiB per synced write (lower is better: the ratio is ext4 / Basalt).
kib() { python3 -c 'import sys; print(f"{int(open(sys.argv[1]).read())/1024/max(1,int(sys.argv[2])):.1f}")' "$1" "$2"; }
b=$(kib "$WORK/basalt.syncw.bytes" "$(fio_ios "$WORK/basalt.syncw.json")"); x=$(kib "$WORK/ext4.syncw.bytes" "$(fio_ios "$WORK/ext4.syncw.json")")
printf '%-34s basalt %10s  ext4 %10s  ratio %s\n' "device KiB per synced 4k write" "$b" "$x" "$(ratio "$x" "$b")"
for p in create stat delete; do
  v() { awk -v p=$p '$1==p{print $2}' "$WORK/$1.files"; }
  report_ceiling "$p 4k files/s (8 threads)" "$(v basalt)" "$(v ext4)" "$(v null)"
done
for p in untar find du; do
  v() { awk -v p=$p '$1==p{print $2}' "$WORK/$1.tree"; }
  b=$(v basalt); x=$(v ext4); n=$(v null)
  # For times, the ratio is ext4 time / the other's (higher is better, like the rest).
  printf '%-34s basalt %9.2fs  ext4 %9.2fs  ratio %s  | FUSE ceiling %9.2fs  ratio %s\n' \
    "$p (source tree)" "$b" "$x" "$(ratio "$x" "$b")" "$n" "$(ratio "$x" "$n")"
done
