# Sourced, not run, by the fusefs benchmark scripts (after `cd` to the workspace root):
#   DEV                 the dev binary, built in release mode
#   drop                sync and drop the page cache (cold reads)
#   fio_rate F D U      rate of direction D (read|write) in fio JSON file F: MiB/s (U=bw) or IOPS (U=iops)
#   now, since T        a timestamp; seconds since timestamp T (3 decimals)
#   record FIELDS...    appends FIELDS as one tab-separated line to $RESULTS
#   start_mount MNT LOG ARGS...  runs `$DEV ARGS... MNT` in the background (output to LOG)
#                       and waits until MNT is mounted (else prints LOG and exits 1);
#                       the daemon's pid goes to MOUNT_PID
#   stop_mount PID MNT  stops daemon PID (if running) and detaches what it left at MNT
cargo build --release -p basalt-fusefs --bin basalt-fusefs-dev >&2
TARGET=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
DEV="$TARGET/release/basalt-fusefs-dev"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
fio_rate() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["jobs"][0][sys.argv[2]]; print(round(d["bw"]/1024,1) if sys.argv[3]=="bw" else round(d["iops"]))' "$@"
}
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$(now)"; }
record() { (IFS=$'\t'; echo "$*") >>"$RESULTS"; }
start_mount() {
  local mnt=$1 log=$2
  shift 2
  "$DEV" "$@" "$mnt" >"$log" 2>&1 &
  MOUNT_PID=$!
  for _ in $(seq 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
  mountpoint -q "$mnt" || { cat "$log"; exit 1; }
}
stop_mount() {
  if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then kill "$1"; wait "$1" || true; fi
  if mountpoint -q "$2"; then fusermount3 -u -z "$2"; fi
}
