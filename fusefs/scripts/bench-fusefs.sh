#!/usr/bin/env bash
# Basalt mount vs ext4 on the same disk: fio sequential write/read (1 MiB blocks,
# end_fsync), fio 4 KiB random reads with O_DIRECT at iodepth 1 and 16,
# 4 KiB random writes each followed by fdatasync (a database's page writes) with the
# device bytes each costs, SQLite commits in WAL mode with synchronous=full
# (scripts/sqlite-commits.py), PostgreSQL pgbench (TPC-B-like, 4 clients, its data
# directory on the filesystem), create/stat/delete of many 4 KiB files with 8 threads, untar
# of a source tree then find and du. For the measures bound by FUSE round trips (random
# reads, file creation, stat, delete, the source tree) also the null filesystem's
# result: the ceiling of any FUSE filesystem on this machine (ARCHITECTURE.md, "The
# FUSE ceiling").
#
# Every measure runs BENCH_ROUNDS times, the filesystems interleaved (their order
# rotated each round), so that a machine whose speed drifts over minutes moves all of
# them alike. One line per measure: each filesystem's median, the median of the
# per-round ratios with their range, and the ceiling; every value goes to a TSV file
# (BENCH_OUT) for a closer look.
#
# Env: BENCH_DIR (default /var/tmp, must be on the disk to compare), BENCH_SIZE
# (default 4g), BENCH_FILES (default 100000), BENCH_CHUNK (chunk size, default the
# crate's), BENCH_OPTS (extra -o options for the mount, e.g. io_uring), BENCH_RUNTIME
# (seconds of each random-read and synced-write run, default 10), BENCH_ROUNDS
# (default 3), BENCH_TREE (the source tree to untar, default ~/.cargo/registry/src),
# BENCH_SQL_COMMITS (SQLite commits per run, default 2000), BENCH_PG_SCALE (pgbench
# scale factor, default 10: 1,000,000 accounts, 160 MB; each run lasts BENCH_RUNTIME),
# BENCH_OUT (default target/bench-fusefs.tsv).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! [ -c /dev/fuse ]; then echo "bench-fusefs: SKIPPED: needs root and /dev/fuse"; exit 0; fi
command -v fio >/dev/null || { echo "bench-fusefs: fio missing (make deps)"; exit 1; }
SIZE=${BENCH_SIZE:-4g}
FILES=${BENCH_FILES:-100000}
RUNTIME=${BENCH_RUNTIME:-10}
ROUNDS=${BENCH_ROUNDS:-3}
SQL_COMMITS=${BENCH_SQL_COMMITS:-2000}
PG_SCALE=${BENCH_PG_SCALE:-10}
BASE=${BENCH_DIR:-/var/tmp}
TREE=$(readlink -f "${BENCH_TREE:-$HOME/.cargo/registry/src}")
[ -d "$TREE" ] || { echo "bench-fusefs: no source tree at $TREE (set BENCH_TREE)"; exit 1; }
source fusefs/scripts/bench-lib.sh
source fusefs/scripts/pg-lib.sh
OUT=${BENCH_OUT:-$TARGET/bench-fusefs.tsv}
WORK=$(mktemp -d "$BASE/basalt-fusefs-bench.XXXXXX")
chmod 755 "$WORK" # PostgreSQL runs as postgres and must reach its directories
RESULTS="$WORK/results.tsv"
DEVPID=""
NULLPID=""
source scripts/fuse-uring-switch.sh
cleanup() {
  set +e
  pg_kill
  fuse_uring_restore
  stop_mount "$DEVPID" "$WORK/mnt"
  stop_mount "$NULLPID" "$WORK/null"
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt" "$WORK/ext4/c"
EXTRA=()
[ -n "${BENCH_CHUNK:-}" ] && EXTRA+=(--chunk-size "$BENCH_CHUNK")
[ -n "${BENCH_OPTS:-}" ] && EXTRA+=(-o "$BENCH_OPTS")
# -o io_uring needs the kernel's switch on for the run (put back at exit).
case "${BENCH_OPTS:-}" in *io_uring*) fuse_uring_set Y ;; esac
start_mount "$WORK/mnt" "$WORK/dev.log" mount --data "$WORK/data" "${EXTRA[@]}"
DEVPID=$MOUNT_PID
mkdir "$WORK/mnt/c"
# The null filesystem (no storage work, FUSE only) beside it: the ceiling of any FUSE
# filesystem for the round-trip-bound measures. It keeps data in memory (files of at
# most 1 GiB), so it runs the random reads on a 1 GiB file and no sequential or
# synced-write runs.
mkdir -p "$WORK/null"
NULL_OPTS=()
case "${BENCH_OPTS:-}" in *io_uring*) NULL_OPTS=(-o "$BENCH_OPTS") ;; esac # the same transport
start_mount "$WORK/null" "$WORK/null.log" nullfs "${NULL_OPTS[@]}"
NULLPID=$MOUNT_PID
mkdir "$WORK/null/c"
fio --name=seqw --directory="$WORK/null/c" --filename=seq --rw=write --bs=1M --size=1g >/dev/null
tar -C "$(dirname "$TREE")" -cf "$WORK/src.tar" "$(basename "$TREE")"

# Bytes written so far to the block device holding $BASE (/proc/diskstats, 512-byte sectors).
DEVBLK=$(basename "$(readlink -f "/sys/dev/block/$(findmnt -n -o MAJ:MIN -T "$BASE" | tr -d ' ')")")
written() { awk -v d="$DEVBLK" '$3==d{printf "%.0f\n", $10*512}' /proc/diskstats; }
dir_of() { case $1 in basalt) echo "$WORK/mnt/c" ;; ext4) echo "$WORK/ext4/c" ;; null) echo "$WORK/null/c" ;; esac; }
# The filesystems $2... in round $1's order: rotated by one each round.
order() {
  local r=$1; shift
  local fs=("$@")
  for i in $(seq 0 $(($# - 1))); do echo "${fs[$(((i + r) % $#))]}"; done
}
# pgbench's database on each filesystem, created once (each round starts the server,
# runs pgbench with its vacuum, and stops it).
for fs in basalt ext4; do
  pg_init "$(dir_of $fs)/pg"
  pg_start "$(dir_of $fs)/pg" "$WORK/pgsock-$fs"
  pgbench_run "$WORK/pgsock-$fs" "$WORK/pgbench.log" -i -q -s "$PG_SCALE" || exit 1
  pg_stop "$(dir_of $fs)/pg"
done
# fio_run FS MEASURE ROUND DIRECTION bw|iops FIO_ARGS...: one fio run, its rate recorded.
fio_run() {
  local fs=$1 m=$2 r=$3 dir=$4 unit=$5; shift 5
  fio "$@" --output-format=json >"$WORK/f.json"
  record "$fs" "$m" "$r" "$(fio_rate "$WORK/f.json" "$dir" "$unit")"
}

for r in $(seq "$ROUNDS"); do
  echo "bench-fusefs: round $r/$ROUNDS" >&2
  for fs in $(order "$r" basalt ext4); do
    d=$(dir_of $fs)
    rm -f "$d/seq"
    drop
    fio_run $fs seqw "$r" write bw --name=seqw --directory="$d" --filename=seq --rw=write --bs=1M --size="$SIZE" --end_fsync=1
  done
  for fs in $(order "$r" basalt ext4); do
    drop
    fio_run $fs seqr "$r" read bw --name=seqr --directory="$(dir_of $fs)" --filename=seq --rw=read --bs=1M --size="$SIZE"
  done
  for qd in 1 16; do
    for fs in $(order "$r" basalt ext4 null); do
      size=$SIZE
      [ $fs = null ] && size=1g
      drop
      fio_run $fs rr$qd "$r" read iops --name=randr --directory="$(dir_of $fs)" --filename=seq --rw=randread --bs=4k \
        --size=$size --direct=1 --ioengine=libaio --iodepth=$qd --time_based --runtime="$RUNTIME"
    done
  done
  for fs in $(order "$r" basalt ext4); do
    d=$(dir_of $fs)
    drop
    w0=$(written)
    fio_run $fs syncw "$r" write iops --name=syncw --directory="$d" --filename=seq --rw=randwrite --bs=4k --size="$SIZE" \
      --fdatasync=1 --time_based --runtime="$RUNTIME"
    sync -f "$d"
    ios=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["total_ios"])' "$WORK/f.json")
    record $fs syncw_kib "$r" "$(python3 -c 'import sys; print(f"{int(sys.argv[1])/1024/max(1,int(sys.argv[2])):.1f}")' $(($(written) - w0)) "$ios")"
  done
  for fs in $(order "$r" basalt ext4); do
    record $fs sqlite "$r" "$(python3 fusefs/scripts/sqlite-commits.py "$(dir_of $fs)/bench.db" "$SQL_COMMITS")"
  done
  for fs in $(order "$r" basalt ext4); do
    drop
    pg_start "$(dir_of $fs)/pg" "$WORK/pgsock-$fs"
    pgbench_run "$WORK/pgsock-$fs" "$WORK/pgbench.log" -c 4 -j 2 -T "$RUNTIME" || exit 1
    pg_stop "$(dir_of $fs)/pg"
    record $fs pgbench "$r" "$(pgbench_tps "$WORK/pgbench.log")"
  done
  for fs in $(order "$r" basalt ext4 null); do
    d=$(dir_of $fs)
    "$DEV" files --dir "$d/files" --count "$FILES" --threads 8 --size 4096 >"$WORK/files.txt"
    for p in create stat delete; do record $fs $p "$r" "$(awk -v p=$p '$1==p{print $2}' "$WORK/files.txt")"; done
    rm -rf "$d/files"
  done
  for fs in $(order "$r" basalt ext4 null); do
    d=$(dir_of $fs)
    mkdir -p "$d/src"
    drop
    t=$(now)
    tar -C "$d/src" -xf "$WORK/src.tar"
    sync -f "$d/src"
    record $fs untar "$r" "$(since "$t")"
    drop
    t=$(now)
    find "$d/src" >/dev/null
    record $fs find "$r" "$(since "$t")"
    t=$(now)
    du -s "$d/src" >/dev/null
    record $fs du "$r" "$(since "$t")"
    rm -rf "$d/src"
  done
done
cp "$RESULTS" "$OUT"

# Per measure: medians, the per-round ratios (Basalt / ext4 for rates, ext4 / Basalt for
# times and device bytes: above 1, Basalt is ahead) as median [min-max], the ceiling.
python3 - "$RESULTS" "$ROUNDS" "$SIZE" "$FILES" "$(nproc)" "$BASE" "$OUT" <<'PY'
import sys, statistics
path, rounds, size, files, cores, base, out = sys.argv[1:]
vals = {}
for line in open(path):
    fs, m, r, v = line.rstrip("\n").split("\t")
    vals.setdefault((fs, m), {})[int(r)] = float(v)
MEASURES = [  # key, label, lower is better
    ("seqw", "fio seq write 1M end_fsync MiB/s", False),
    ("seqr", "fio seq read 1M MiB/s", False),
    ("rr1", "fio randread 4k direct qd1 IOPS", False),
    ("rr16", "fio randread 4k direct qd16 IOPS", False),
    ("syncw", "fio randwrite 4k fdatasync IOPS", False),
    ("syncw_kib", "device KiB per synced 4k write", True),
    ("sqlite", "sqlite WAL commits/s (sync=full)", False),
    ("pgbench", "pgbench TPC-B tps (4 clients)", False),
    ("create", "create 4k files/s (8 threads)", False),
    ("stat", "stat 4k files/s (8 threads)", False),
    ("delete", "delete 4k files/s (8 threads)", False),
    ("untar", "untar (source tree) s", True),
    ("find", "find (source tree) s", True),
    ("du", "du (source tree) s", True),
]
def ratios(a, b, m, lower):
    xs = vals.get((a, m), {}); ys = vals.get((b, m), {})
    rs = [(ys[r] / xs[r] if lower else xs[r] / ys[r]) for r in xs if r in ys and (xs[r] if lower else ys[r])]
    return rs
def fmt(x):
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}"
def spread(rs):
    return f"{statistics.median(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}]" if rs else "n/a"
print(f"bench-fusefs: size {size}, {files} files, {cores} cores, dir {base}, {rounds} rounds interleaved; medians, ratio median [min-max] over rounds")
for m, label, lower in MEASURES:
    b, x = vals.get(("basalt", m)), vals.get(("ext4", m))
    if not b or not x:
        continue
    rs = ratios("basalt", "ext4", m, lower)
    line = (f"{label:34} basalt {fmt(statistics.median(b.values())):>9}  ext4 {fmt(statistics.median(x.values())):>9}"
            f"  ratio {spread(rs)}")
    n = vals.get(("null", m))
    if n:
        cs = ratios("null", "ext4", m, lower)
        line += f"  | FUSE ceiling {fmt(statistics.median(n.values())):>9}  ratio {statistics.median(cs):.2f}" if cs else "  | FUSE ceiling n/a"
    print(line)
print(f"bench-fusefs: every value (filesystem, measure, round, value) in {out}")
PY
