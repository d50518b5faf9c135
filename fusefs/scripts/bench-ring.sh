#!/usr/bin/env bash
# The FUSE transport's ceiling: the null filesystem over /dev/fuse ("classic") and
# over io_uring with its queue threads on the requesting CPU ("same") or the next one
# ("other"), in interleaved rounds on fresh mounts: fio sequential read (1 MiB, after
# dropping caches), 4 KiB O_DIRECT random reads at iodepth 1 and 16, and
# create/stat/delete of 4 KiB files with 8 threads and with 1. One line per mount
# and round (ARCHITECTURE.md, "FUSE over io_uring"). Env: ROUNDS (default 3),
# RING_FILES (default 20000), RING_SIZE (fio file, default 512M), RING_RUNTIME
# (seconds per random-read run, default 5). Turns the kernel's enable_uring on for
# the run and puts back what it was.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! [ -c /dev/fuse ]; then echo "bench-ring: SKIPPED: needs root and /dev/fuse"; exit 0; fi
source scripts/fuse-uring-switch.sh
if ! fuse_uring_present; then echo "bench-ring: SKIPPED: this kernel has no FUSE over io_uring ($FUSE_URING_SWITCH)"; exit 0; fi
command -v fio >/dev/null || { echo "bench-ring: fio missing (make deps)"; exit 1; }
ROUNDS=${ROUNDS:-3}
FILES=${RING_FILES:-20000}
SIZE=${RING_SIZE:-512M}
RUNTIME=${RING_RUNTIME:-5}
cargo build --release -p basalt-fusefs --bin basalt-fusefs-dev >&2
TARGET=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
DEV="$TARGET/release/basalt-fusefs-dev"
WORK=$(mktemp -d /tmp/basalt-ring-bench.XXXXXX)
cleanup() {
  set +e
  for m in "$WORK"/*; do mountpoint -q "$m" && fusermount3 -u -z "$m"; done
  fuse_uring_restore
  rm -rf "$WORK"
}
trap cleanup EXIT
fuse_uring_set Y

terse() { fio --output-format=terse "$@" 2>/dev/null; }

run() { # $1 = classic | same | other
  local m="$WORK/$1" opts=()
  [ "$1" = classic ] || opts=(-o "io_uring=$1")
  mkdir -p "$m"
  "$DEV" nullfs "${opts[@]}" "$m" >/dev/null 2>"$WORK/$1.log" &
  local pid=$!
  for _ in $(seq 100); do mountpoint -q "$m" && break; sleep 0.05; done
  mountpoint -q "$m" || { cat "$WORK/$1.log"; exit 1; }
  mkdir "$m/c"
  terse --name=w --filename="$m/c/f" --rw=write --bs=1M --size="$SIZE" >/dev/null
  echo 3 > /proc/sys/vm/drop_caches
  local seq q1 q16 f8 f1
  seq=$(terse --name=r --filename="$m/c/f" --rw=read --bs=1M --size="$SIZE" | awk -F';' '{printf "%d", $7/1024}')
  q1=$(terse --name=q1 --filename="$m/c/f" --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=1 --size="$SIZE" --runtime="$RUNTIME" --time_based | awk -F';' '{print $8}')
  q16=$(terse --name=q16 --filename="$m/c/f" --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=16 --size="$SIZE" --runtime="$RUNTIME" --time_based | awk -F';' '{print $8}')
  rm -f "$m/c/f"
  f8=$("$DEV" files --dir "$m/c/t8" --count "$FILES" --threads 8 --size 4096 | awk '/^(create|stat|delete)/{printf "%s ", $2}')
  f1=$("$DEV" files --dir "$m/c/t1" --count "$FILES" --threads 1 --size 4096 | awk '/^(create|stat|delete)/{printf "%s ", $2}')
  printf '%-8s seq_read_MiB/s %6s  randread_qd1 %7s  qd16 %7s  files/s_8_threads(create stat delete) %s  1_thread %s\n' \
    "$1" "$seq" "$q1" "$q16" "$f8" "$f1"
  fusermount3 -u "$m"
  wait "$pid"
}

for r in $(seq "$ROUNDS"); do
  for k in classic same other; do run "$k"; done
done
