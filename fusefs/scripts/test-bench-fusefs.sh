#!/usr/bin/env bash
# The benchmark harness itself (make bench-fusefs) at toy sizes: every measure is
# reported with both filesystems' medians and a ratio range, the FUSE ceiling where it
# applies, and the TSV holds one value per filesystem, measure and round. Then the
# latency split (make latency-fusefs) at toy sizes: each queue depth's FUSE and device
# times. Timings at these sizes mean nothing; this checks that the tools run and
# report what they say.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! [ -c /dev/fuse ]; then echo "test-bench-fusefs: SKIPPED: needs root and /dev/fuse"; exit 0; fi
OUT=$(mktemp /tmp/bench-fusefs-smoke.XXXXXX.tsv)
LOG=$(mktemp /tmp/bench-fusefs-smoke.XXXXXX.log)
trap 'rm -f "$OUT" "$LOG"' EXIT
BENCH_SIZE=64m BENCH_FILES=400 BENCH_RUNTIME=1 BENCH_ROUNDS=2 BENCH_SQL_COMMITS=50 BENCH_PG_SCALE=1 BENCH_TREE=engine/src BENCH_OUT="$OUT" \
  ./fusefs/scripts/bench-fusefs.sh >"$LOG"
cat "$LOG"
python3 - "$LOG" "$OUT" <<'PY'
import re, sys
log, tsv = open(sys.argv[1]).read(), sys.argv[2]
labels = ["fio seq write 1M end_fsync MiB/s", "fio seq read 1M MiB/s", "fio randread 4k direct qd1 IOPS",
          "fio randread 4k direct qd16 IOPS", "fio randwrite 4k fdatasync IOPS", "device KiB per synced 4k write",
          "sqlite WAL commits/s (sync=full)", "pgbench TPC-B tps (4 clients)", "create 4k files/s (8 threads)", "stat 4k files/s (8 threads)", "delete 4k files/s (8 threads)",
          "untar (source tree) s", "find (source tree) s", "du (source tree) s"]
with_ceiling = {"fio randread 4k direct qd1 IOPS", "fio randread 4k direct qd16 IOPS", "create 4k files/s (8 threads)",
                "stat 4k files/s (8 threads)", "delete 4k files/s (8 threads)", "untar (source tree) s",
                "find (source tree) s", "du (source tree) s"}
num = r"[0-9]+(?:\.[0-9]+)?"
bad = []
for label in labels:
    pat = (re.escape(label) + rf"\s+basalt\s+({num})\s+ext4\s+({num})\s+ratio ({num}) \[({num})-({num})\]"
           + (rf"\s+\| FUSE ceiling\s+({num})\s+ratio ({num})" if label in with_ceiling else r"\s*$"))
    m = re.search(pat, log, re.M)
    if not m:
        bad.append(f"no well-formed line for {label!r}")
        continue
    med, lo, hi = float(m.group(3)), float(m.group(4)), float(m.group(5))
    if not (lo <= med <= hi and lo > 0):
        bad.append(f"{label}: ratio {med} outside its range [{lo}-{hi}]")
rows = [l.split("\t") for l in open(tsv).read().splitlines()]
keys = {}
for fs, m, r, v in rows:
    float(v)
    keys.setdefault((fs, m), set()).add(int(r))
measures = ["seqw", "seqr", "rr1", "rr16", "syncw", "syncw_kib", "sqlite", "pgbench", "create", "stat", "delete", "untar", "find", "du"]
want = {(fs, m) for fs in ("basalt", "ext4") for m in measures} | {("null", m) for m in ["rr1", "rr16", "create", "stat", "delete", "untar", "find", "du"]}
if set(keys) != want:
    bad.append(f"TSV measures differ: missing {sorted(want - set(keys))}, extra {sorted(set(keys) - want)}")
bad += [f"{k}: rounds {sorted(v)}" for k, v in keys.items() if v != {1, 2}]
if bad:
    sys.exit("test-bench-fusefs: FAILED:\n  " + "\n  ".join(bad))
print(f"test-bench-fusefs: ok: {len(labels)} measures reported with medians, ratio ranges and ceilings; {len(rows)} values in the TSV (2 rounds)")
PY

LAT_SIZE=64m LAT_RUNTIME=1 LAT_QD="1 4" ./fusefs/scripts/latency-split.sh >"$LOG" 2>/dev/null
cat "$LOG"
python3 - "$LOG" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
if "latency-split: SKIPPED:" in log:
    print("test-bench-fusefs: latency split skipped (see its reason above)")
    sys.exit(0)
num = r"[0-9]+(?:\.[0-9]+)?"
bad = []
for qd in (1, 4):
    m = re.search(rf"^qd{qd}: fio ({num}) IOPS, latency p50 ({num}) p99 ({num}) us\n"
                  rf"  FUSE READ queued to reply\s+mean\s+({num})\s+p50\s+({num})\s+p99\s+({num}) us\s+\(({num}) reads\)\n"
                  rf"  device issue to completion\s+mean\s+({num})\s+p50\s+({num})\s+p99\s+({num}) us\s+\(({num}) reads, ({num}) per FUSE read\)\n"
                  rf"  device reads in flight at each issue: mean ({num}) \(fio keeps {qd}\)\n"
                  rf"  FUSE time beyond a device read \(means\): -?{num} us$", log, re.M)
    if not m:
        bad.append(f"qd{qd}: no well-formed split")
        continue
    iops, fuse_reads, dev_reads, depth = float(m.group(1)), float(m.group(7)), float(m.group(11)), float(m.group(13))
    if not (iops > 0 and fuse_reads > 0 and dev_reads > 0 and depth >= 1):
        bad.append(f"qd{qd}: {iops} IOPS, {fuse_reads} FUSE reads, {dev_reads} device reads, depth {depth}")
if bad:
    sys.exit("test-bench-fusefs: latency split FAILED:\n  " + "\n  ".join(bad))
print("test-bench-fusefs: ok: latency split at qd1 and qd4 with traced FUSE and device reads")
PY
