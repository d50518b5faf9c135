#!/usr/bin/env bash
# What each of the mount's performance choices buys (issue #5: "document each choice
# with its measured effect"): each workload a choice affects runs on a fresh mount (and
# data directory) with the defaults and on one with that choice turned off, ROUNDS
# interleaved rounds, medians.
# Besides the times, the FUSE requests (`/.basalt/stats.json`, `filesystem.requests`;
# reading it adds a few) and engine commits (`engine.commits`) each workload cost:
# counts do not depend on this VM's noise. Results in fusefs/README.md, "Measured effect of each choice".
# Env: ROUNDS (default 3), OPT_SIZE (fio file, default 512M), OPT_FILES (files for the
# create/stat/delete and tree workloads, default 20000), OPT_RUNTIME (random-read
# seconds, default 5), OPT_WORKLOADS (some of: seqwrite smallwrite seqread randread
# files tree; default all), BENCH_DIR (where mounts and data go, default /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! [ -c /dev/fuse ]; then echo "bench-options: SKIPPED: needs root and /dev/fuse"; exit 0; fi
command -v fio >/dev/null || { echo "bench-options: fio missing (make deps)"; exit 1; }
ROUNDS=${ROUNDS:-3}
SIZE=${OPT_SIZE:-512M}
FILES=${OPT_FILES:-20000}
RUNTIME=${OPT_RUNTIME:-5}
source fusefs/scripts/bench-lib.sh
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/basalt-options-bench.XXXXXX")
PID=""
cleanup() {
  set +e
  stop_mount "$PID" "$WORK/mnt"
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt" "$WORK/results"
RESULTS="$WORK/results/all.tsv"

# The tree for readdir/stat: FILES files of 1 KiB in FILES/100 directories.
mkdir -p "$WORK/tree"
python3 - "$WORK/tree" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 100:04}")
    if i % 100 == 0:
        os.mkdir(d)
    with open(os.path.join(d, f"f{i % 100:03}"), "wb") as f:
        f.write(b"x" * 1024)
PY
tar -C "$WORK/tree" -cf "$WORK/tree.tar" . && rm -rf "$WORK/tree"

# Each variant: name, what it turns off, dev-binary arguments, the workloads it affects.
VARIANTS=(
  "default|(the defaults)||seqwrite smallwrite seqread randread files tree"
  "no_writeback_cache|kernel writeback cache|-o no_writeback_cache|seqwrite smallwrite files tree"
  "max_write_128k|1 MiB writes (128 KiB instead)|-o max_write=131072|seqwrite"
  "readahead_128k|4 MiB readahead (the kernel's 128 KiB)|-o readahead_kb=0|seqread"
  "one_worker|a worker per core, at least two (one)|--threads 1|randread files"
  "no_readdirplus|readdirplus|-o no_readdirplus|tree"
  "no_dir_cache|directory listings kept by the kernel|-o no_dir_cache|tree"
  "no_cache_timeouts|30 s attribute and entry timeouts (0)|-o attr_timeout=0,entry_timeout=0|tree"
)

mount_variant() {
  local args=()
  read -r -a args <<<"$1"
  rm -rf "$WORK/data"
  start_mount "$WORK/mnt" "$WORK/dev.log" mount --data "$WORK/data" "${args[@]}"
  PID=$MOUNT_PID
  mkdir "$WORK/mnt/c"
}
unmount_variant() { stop_mount "$PID" "$WORK/mnt"; PID=""; }
stats() { cat "$WORK/mnt/.basalt/stats.json"; }
# Requests and engine commits between two stats.json snapshots, as "op=n ..." (nonzero only).
counts() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a["filesystem"]["requests"], b["filesystem"]["requests"]
parts = [f"{k}={rb[k] - ra[k]}" for k in sorted(rb) if rb[k] != ra[k]]
parts.append(f"commits={b['engine']['commits'] - a['engine']['commits']}")
print(" ".join(parts))
PY
}
# record VARIANT MEASURE VALUE COUNTS (bench-lib.sh; COUNTS may be empty)

# fio_measured VARIANT MEASURE read|write bw|iops FIO_ARGS...: runs fio and records its
# rate with the requests and engine commits it cost.
fio_measured() {
  local v=$1 m=$2 dir=$3 unit=$4; shift 4
  stats >"$WORK/s0.json"
  fio "$@" --output-format=json >"$WORK/f.json"
  stats >"$WORK/s1.json"
  record "$v" "$m" "$(fio_rate "$WORK/f.json" "$dir" "$unit")" "$(counts "$WORK/s0.json" "$WORK/s1.json")"
}
# The SIZE file `seq` in $1, written and out of the page cache.
laid_out() { fio --name=seqw --directory="$1" --filename=seq --rw=write --bs=1M --size="$SIZE" --end_fsync=1 >/dev/null; drop; }

run_workload() { # variant workload
  local v=$1 d="$WORK/mnt/c" s0="$WORK/s0.json" s1="$WORK/s1.json"
  case $2 in
    seqwrite)
      fio_measured "$v" "seq write 1M, MiB/s" write bw \
        --name=seqw --directory="$d" --filename=seq --rw=write --bs=1M --size="$SIZE" --end_fsync=1 ;;
    smallwrite)
      fio_measured "$v" "seq write 4k (256 MiB), MiB/s" write bw \
        --name=smallw --directory="$d" --filename=small --rw=write --bs=4k --size=256M --end_fsync=1 ;;
    seqread)
      laid_out "$d"
      fio_measured "$v" "seq read 1M (cold), MiB/s" read bw \
        --name=seqr --directory="$d" --filename=seq --rw=read --bs=1M --size="$SIZE" ;;
    randread)
      laid_out "$d"
      for qd in 1 16; do
        fio_measured "$v" "randread 4k direct qd$qd, IOPS" read iops --name=rr --directory="$d" --filename=seq \
          --rw=randread --bs=4k --size="$SIZE" --direct=1 --ioengine=libaio --iodepth=$qd --time_based --runtime="$RUNTIME"
      done ;;
    files)
      stats >"$s0"
      "$DEV" files --dir "$d/files" --count "$FILES" --threads 8 --size 4096 >"$WORK/files.txt"
      stats >"$s1"
      for p in create stat delete; do
        record "$v" "$p 4k files (8 threads), files/s" "$(awk -v p=$p '$1==p{print $2}' "$WORK/files.txt")" \
          "$([ $p = create ] && echo "(whole run) $(counts "$s0" "$s1")")"
      done ;;
    tree)
      stats >"$s0"
      local t; t=$(now)
      tar -C "$d" -xf "$WORK/tree.tar"
      sync -f "$d"
      record "$v" "untar of $FILES files of 1 KiB, s" "$(since "$t")" "$(stats >"$s1"; counts "$s0" "$s1")"
      drop
      stats >"$s0"
      t=$(now)
      ls -lR "$d" >/dev/null
      record "$v" "ls -lR of $FILES files (cold), s" "$(since "$t")" "$(stats >"$s1"; counts "$s0" "$s1")"
      stats >"$s0"
      t=$(now)
      find "$d" -type f -size +0 >/dev/null
      record "$v" "find -size of the same (warm), s" "$(since "$t")" "$(stats >"$s1"; counts "$s0" "$s1")"
      ;;
  esac
}

for r in $(seq "$ROUNDS"); do
  for w in ${OPT_WORKLOADS:-seqwrite smallwrite seqread randread files tree}; do
    for spec in "${VARIANTS[@]}"; do
      IFS='|' read -r name _ args workloads <<<"$spec"
      case " $workloads " in *" $w "*) ;; *) continue ;; esac
      echo "bench-options: round $r/$ROUNDS: $w, $name" >&2
      mount_variant "$args"
      run_workload "$name" "$w"
      unmount_variant
    done
  done
done

# Per measure: the default's median, then each variant's median, and how many times
# faster the default is (its rate over the variant's, or the variant's time over its);
# the request counts of the last round.
python3 - "$WORK/results/all.tsv" "$ROUNDS" "$SIZE" "$FILES" "$(nproc)" "${VARIANTS[@]}" <<'PY'
import sys, statistics
path, rounds, size, files, cores, *variants = sys.argv[1:]
off = {v.split("|")[0]: v.split("|")[1] for v in variants}
rows = [l.rstrip("\n").split("\t") for l in open(path)]
vals, cnt = {}, {}
for v, m, x, c in rows:
    vals.setdefault((v, m), []).append(float(x))
    cnt[(v, m)] = c
print(f"bench-options: {rounds} rounds, fio file {size}, {files} files, {cores} cores; medians")
print(f"{'turned off':42} {'measure':38} {'default':>10} {'variant':>10} {'gain':>6}")
for (v, m), xs in vals.items():
    if v == "default":
        continue
    d = statistics.median(vals[("default", m)])
    x = statistics.median(xs)
    gain = (x / d if d else 0) if m.endswith(", s") else (d / x if x else 0)
    print(f"{off[v]:42} {m:38} {d:10.2f} {x:10.2f} {gain:6.2f}")
    if cnt[(v, m)] or cnt[("default", m)]:
        print(f"{'':42}   requests, default: {cnt[('default', m)]}")
        print(f"{'':42}   requests, variant: {cnt[(v, m)]}")
PY
