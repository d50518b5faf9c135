#!/usr/bin/env bash
# Basalt mount vs ext4 on the same disk: fio sequential write/read (1 MiB blocks,
# end_fsync), fio 4 KiB random reads with O_DIRECT at iodepth 1 and 16,
# 4 KiB random writes each followed by fdatasync (a database's page writes) with the
# device bytes each costs, create/stat/delete of many 4 KiB files with 8 threads, untar
# of a source tree then find and du. Prints one line per measure with both results and
# the ratio. Env: BENCH_DIR (default /var/tmp, must be on the disk to compare),
# BENCH_SIZE (default 4g), BENCH_FILES (default 100000), BENCH_CHUNK (chunk size,
# default the crate's), BENCH_OPTS (extra -o options for the mount), BENCH_RUNTIME
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
cleanup() {
  set +e
  if [ -n "$DEVPID" ] && kill -0 "$DEVPID" 2>/dev/null; then kill "$DEVPID"; wait "$DEVPID"; fi
  mountpoint -q "$WORK/mnt" && fusermount3 -u -z "$WORK/mnt"
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt" "$WORK/ext4/c"
EXTRA=()
[ -n "${BENCH_CHUNK:-}" ] && EXTRA+=(--chunk-size "$BENCH_CHUNK")
[ -n "${BENCH_OPTS:-}" ] && EXTRA+=(-o "$BENCH_OPTS")
"$DEV" mount --data "$WORK/data" "${EXTRA[@]}" "$WORK/mnt" >"$WORK/dev.log" 2>&1 &
DEVPID=$!
for _ in $(seq 200); do mountpoint -q "$WORK/mnt" && break; sleep 0.05; done
mountpoint -q "$WORK/mnt" || { cat "$WORK/dev.log"; exit 1; }
mkdir "$WORK/mnt/c"

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

for fs in basalt ext4; do
  d="$WORK/ext4/c"; [ $fs = basalt ] && d="$WORK/mnt/c"
  drop
  fio --name=seqw --directory="$d" --filename=seq --rw=write --bs=1M --size="$SIZE" --end_fsync=1 --output-format=json >"$WORK/$fs.seqw.json"
  drop
  fio --name=seqr --directory="$d" --filename=seq --rw=read --bs=1M --size="$SIZE" --output-format=json >"$WORK/$fs.seqr.json"
  for qd in 1 16; do
    drop
    fio --name=randr --directory="$d" --filename=seq --rw=randread --bs=4k --size="$SIZE" --direct=1 \
      --ioengine=libaio --iodepth=$qd --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/$fs.rr$qd.json"
  done
  drop
  w0=$(written)
  fio --name=syncw --directory="$d" --filename=seq --rw=randwrite --bs=4k --size="$SIZE" --fdatasync=1 \
    --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/$fs.syncw.json"
  sync -f "$d"
  echo $(( $(written) - w0 )) >"$WORK/$fs.syncw.bytes"
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
report "fio randread 4k direct qd1 IOPS" "$(fio_iops "$WORK/basalt.rr1.json")" "$(fio_iops "$WORK/ext4.rr1.json")"
report "fio randread 4k direct qd16 IOPS" "$(fio_iops "$WORK/basalt.rr16.json")" "$(fio_iops "$WORK/ext4.rr16.json")"
report "fio randwrite 4k fdatasync IOPS" "$(fio_iops "$WORK/basalt.syncw.json" write)" "$(fio_iops "$WORK/ext4.syncw.json" write)"
# Device KiB per synced write (lower is better: the ratio is ext4 / Basalt).
kib() { python3 -c 'import sys; print(f"{int(open(sys.argv[1]).read())/1024/max(1,int(sys.argv[2])):.1f}")' "$1" "$2"; }
b=$(kib "$WORK/basalt.syncw.bytes" "$(fio_ios "$WORK/basalt.syncw.json")"); x=$(kib "$WORK/ext4.syncw.bytes" "$(fio_ios "$WORK/ext4.syncw.json")")
printf '%-34s basalt %10s  ext4 %10s  ratio %s\n' "device KiB per synced 4k write" "$b" "$x" "$(ratio "$x" "$b")"
for p in create stat delete; do
  report "$p 4k files/s (8 threads)" "$(awk -v p=$p '$1==p{print $2}' "$WORK/basalt.files")" "$(awk -v p=$p '$1==p{print $2}' "$WORK/ext4.files")"
done
for p in untar find du; do
  b=$(awk -v p=$p '$1==p{print $2}' "$WORK/basalt.tree"); x=$(awk -v p=$p '$1==p{print $2}' "$WORK/ext4.tree")
  # For times, the ratio is ext4 time / Basalt time (higher is better, like the rest).
  printf '%-34s basalt %9.2fs  ext4 %9.2fs  ratio %s\n' "$p (source tree)" "$b" "$x" "$(ratio "$x" "$b")"
done
