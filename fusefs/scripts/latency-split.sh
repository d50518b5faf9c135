#!/usr/bin/env bash
# Where a 4 KiB random read's time goes on a Basalt mount, from kernel tracepoints
# (tracefs): for fio randread with O_DIRECT at each queue depth in LAT_QD, the time
# between FUSE queuing a READ and its reply (fuse:fuse_request_send/end, this mount's
# connection only), the device time of the reads the daemon issued meanwhile
# (block:block_rq_issue/complete, the data directory's disk only), how many reads the
# device held when each was issued, and device reads per FUSE read. What is neither
# device nor FUSE reply is hand-offs and wake-ups (fusefs ARCHITECTURE.md, "Where a
# qd1 read's time goes", "Where a qd16 read's time goes").
# Env: LAT_DIR (where the mount and its data go, default /var/tmp), LAT_SIZE (fio
# file, default 1g), LAT_RUNTIME (seconds traced per queue depth, default 3), LAT_QD
# (default "1 16"), LAT_OPTS (extra -o options for the mount).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! [ -c /dev/fuse ]; then echo "latency-split: SKIPPED: needs root and /dev/fuse"; exit 0; fi
T=/sys/kernel/tracing
[ -d "$T/events/fuse/fuse_request_send" ] || mount -t tracefs nodev "$T" 2>/dev/null || true
if ! [ -d "$T/events/fuse/fuse_request_send" ] || ! [ -d "$T/events/block/block_rq_issue" ]; then
  echo "latency-split: SKIPPED: no fuse and block tracepoints in $T (kernel before 6.12, or tracefs unavailable)"
  exit 0
fi
command -v fio >/dev/null || { echo "latency-split: fio missing (make deps)"; exit 1; }
SIZE=${LAT_SIZE:-1g}
RUNTIME=${LAT_RUNTIME:-3}
source fusefs/scripts/bench-lib.sh
WORK=$(mktemp -d "${LAT_DIR:-/var/tmp}/basalt-latency.XXXXXX")
PID=""
EVENTS=(fuse/fuse_request_send fuse/fuse_request_end block/block_rq_issue block/block_rq_complete)
cleanup() {
  set +e
  echo 0 >"$T/tracing_on"
  for e in "${EVENTS[@]}"; do echo 0 >"$T/events/$e/enable"; echo 0 >"$T/events/$e/filter"; done
  stop_mount "$PID" "$WORK/mnt"
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt"
opts=()
[ -n "${LAT_OPTS:-}" ] && opts=(-o "$LAT_OPTS")
start_mount "$WORK/mnt" "$WORK/dev.log" mount --data "$WORK/data" "${opts[@]}"
PID=$MOUNT_PID
mkdir "$WORK/mnt/c"
fio --name=w --directory="$WORK/mnt/c" --filename=f --rw=write --bs=1M --size="$SIZE" --end_fsync=1 >/dev/null

# The kernel's dev_t (major << 20 | minor) of the FUSE connection and of the data disk.
kdev() { python3 -c 'import sys; a,b=map(int,sys.argv[1].split(":")); print(a<<20|b)' "$1"; }
conn=$(kdev "$(mountpoint -d "$WORK/mnt")")
# Requests reach the whole disks under the data directory's file system (a partition,
# LVM or md device is remapped onto them before the block tracepoints see a request).
src=$(findmnt -n -o SOURCE -T "$WORK/data" | sed 's/\[.*//')
disks=()
while read -r majmin type; do
  if [ "$type" = disk ]; then disks+=("dev == $(kdev "$majmin")"); fi
done < <(lsblk -nrso MAJ:MIN,TYPE "$src" 2>/dev/null)
[ ${#disks[@]} -gt 0 ] || { echo "latency-split: SKIPPED: no block device found under $src (data directory's file system)"; exit 0; }
for e in fuse/fuse_request_send fuse/fuse_request_end; do echo "connection == $conn" >"$T/events/$e/filter"; done
for e in block/block_rq_issue block/block_rq_complete; do (IFS='|'; echo "${disks[*]}" | sed 's/|/ || /g') >"$T/events/$e/filter"; done

echo "latency-split: fio randread 4k direct on a Basalt mount, file $SIZE, ${RUNTIME} s traced per queue depth"
for qd in ${LAT_QD:-1 16}; do
  # Untraced warm-up: the chunks' heads come into the head cache as they would in use.
  fio --name=warm --directory="$WORK/mnt/c" --filename=f --rw=randread --bs=4k --size="$SIZE" --direct=1 \
    --ioengine=libaio --iodepth="$qd" --time_based --runtime=2 >/dev/null
  echo 0 >"$T/tracing_on"
  echo >"$T/trace"
  echo 65536 >"$T/buffer_size_kb"
  for e in "${EVENTS[@]}"; do echo 1 >"$T/events/$e/enable"; done
  echo 1 >"$T/tracing_on"
  fio --name=rr --directory="$WORK/mnt/c" --filename=f --rw=randread --bs=4k --size="$SIZE" --direct=1 \
    --ioengine=libaio --iodepth="$qd" --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/f.json"
  echo 0 >"$T/tracing_on"
  for e in "${EVENTS[@]}"; do echo 0 >"$T/events/$e/enable"; done
  python3 - "$T/trace" "$WORK/f.json" "$qd" <<'PY'
import json, re, statistics as st, sys
trace, fio, qd = sys.argv[1], sys.argv[2], sys.argv[3]
ev = re.compile(r"\s(\d+\.\d+): (fuse_request_send|fuse_request_end|block_rq_issue|block_rq_complete): (.*)")
sent, fuse, issued, dev, depth = {}, [], {}, [], []
for line in open(trace):
    m = ev.search(line)
    if not m:
        continue
    t, name, rest = float(m.group(1)) * 1e6, m.group(2), m.group(3)
    if name == "fuse_request_send":
        if "(FUSE_READ)" in rest:
            sent[re.search(r"req (\d+)", rest).group(1)] = t
    elif name == "fuse_request_end":
        t0 = sent.pop(re.search(r"req (\d+)", rest).group(1), None)
        if t0 is not None:
            fuse.append(t - t0)
    else:
        f = rest.split()
        if len(f) < 2 or not f[1].startswith("R"):
            continue  # writes (the log, metadata) are not part of a read
        s = re.search(r"(\d+) \+ \d+", rest)
        if not s:
            continue
        if name == "block_rq_issue":
            issued[s.group(1)] = t
            depth.append(len(issued))
        else:
            t0 = issued.pop(s.group(1), None)
            if t0 is not None:
                dev.append(t - t0)
j = json.load(open(fio))["jobs"][0]["read"]
p = j["clat_ns"]["percentile"]
if not fuse or not dev:
    sys.exit(f"latency-split: qd{qd}: traced {len(fuse)} FUSE reads and {len(dev)} device reads: nothing to split")
q = lambda v, x: sorted(v)[min(len(v) - 1, int(len(v) * x))]
print(f"qd{qd}: fio {round(j['iops'])} IOPS, latency p50 {p['50.000000']/1000:.0f} p99 {p['99.000000']/1000:.0f} us")
print(f"  FUSE READ queued to reply   mean {st.mean(fuse):6.0f}  p50 {st.median(fuse):6.0f}  p99 {q(fuse, .99):6.0f} us  ({len(fuse)} reads)")
print(f"  device issue to completion  mean {st.mean(dev):6.0f}  p50 {st.median(dev):6.0f}  p99 {q(dev, .99):6.0f} us  ({len(dev)} reads, {len(dev)/len(fuse):.2f} per FUSE read)")
print(f"  device reads in flight at each issue: mean {st.mean(depth):.1f} (fio keeps {qd})")
print(f"  FUSE time beyond a device read (means): {st.mean(fuse) - st.mean(dev):.0f} us")
PY
done
