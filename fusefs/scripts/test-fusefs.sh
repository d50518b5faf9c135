#!/usr/bin/env bash
# pjdfstest (whole suite, compared case by case with ext4 on this machine) and fsx
# (fixed seed, 100,000 operations; then a random seed, printed) against a Basalt
# mount run by the dev binary, over /dev/fuse and then over io_uring (Linux 6.14+;
# the kernel's enable_uring switch is turned on for that pass and put back). Needs root and /dev/fuse; skips (exit 0) with the
# reason printed when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=fusefs
TOOLS=${BASALT_TOOLS:-/var/cache/basalt-tools}
FSX_OPS=${FSX_OPS:-100000}
FSX_RANDOM_OPS=${FSX_RANDOM_OPS:-30000}

if [ "$(id -u)" -ne 0 ]; then echo "test-fusefs: SKIPPED: needs root"; exit 0; fi
if ! [ -c /dev/fuse ]; then echo "test-fusefs: SKIPPED: no /dev/fuse"; exit 0; fi

# Tools: installed once into a cache directory, reused on a warm machine.
if ! [ -x "$TOOLS/bin/pjdfstest" ] || ! [ -x "$TOOLS/bin/fsx" ]; then
  CARGO_TARGET_DIR="$TOOLS/target" cargo install --locked --root "$TOOLS" pjdfstest fsx
fi
# pjdfstest's dummy users: nobody/nogroup (Debian) and tests/tests; group pjdfstest.
id tests >/dev/null 2>&1 || echo 'tests:x:::Dummy User for pjdfstest:/:/usr/sbin/nologin' | newusers
getent group pjdfstest >/dev/null || groupadd pjdfstest

cargo build --release -p basalt-fusefs --bin basalt-fusefs-dev
TARGET=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
DEV="$TARGET/release/basalt-fusefs-dev"

WORK=$(mktemp -d /tmp/basalt-fusefs-test.XXXXXX)
chmod 755 "$WORK" # pjdfstest switches to unprivileged users that must reach the mount
CONF="$(pwd)/$HERE/pjdfstest.toml"
DEVPID=""
source scripts/fuse-uring-switch.sh
cleanup() {
  set +e
  if [ -n "$DEVPID" ] && kill -0 "$DEVPID" 2>/dev/null; then kill "$DEVPID"; wait "$DEVPID"; fi
  mountpoint -q "$WORK/mnt" && fusermount3 -u -z "$WORK/mnt"
  mountpoint -q "$WORK/ext4" && umount "$WORK/ext4"
  fuse_uring_restore
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt" "$WORK/ext4"

# 1. Reference: pjdfstest on a loop-mounted ext4 on this machine.
truncate -s 1G "$WORK/ext4.img"
mkfs.ext4 -q -F "$WORK/ext4.img"
mount -o loop "$WORK/ext4.img" "$WORK/ext4"
mkdir "$WORK/ext4/t"
(cd "$WORK/ext4/t" && "$TOOLS/bin/pjdfstest" -c "$CONF" -p "$WORK/ext4/t" >"$WORK/ext4.log" 2>&1) || true
umount "$WORK/ext4"

# 2-4. The same suite on Basalt, fsx, and a clean unmount from outside; run over
# /dev/fuse, then over FUSE's io_uring transport where the kernel has it (-o io_uring:
# every request but FORGET is then answered on the ring). Sets PJD_FAILED/FSX_FAILED.
PJD_FAILED=0
FSX_FAILED=0
basalt_pass() { # $1 = label, $2 = -o options (may be empty), $3 = fsx operations
  local label=$1 opts=$2 fsx_ops=$3 log="$WORK/basalt-$1.log"
  rm -rf "$WORK/data"
  "$DEV" mount --data "$WORK/data" ${opts:+-o "$opts"} "$WORK/mnt" >"$WORK/dev.log" 2>&1 &
  DEVPID=$!
  for _ in $(seq 200); do mountpoint -q "$WORK/mnt" && break; sleep 0.05; done
  mountpoint -q "$WORK/mnt" || { cat "$WORK/dev.log"; echo "test-fusefs: mount failed ($label)"; exit 1; }
  mkdir "$WORK/mnt/pjdfstest"
  (cd "$WORK/mnt/pjdfstest" && "$TOOLS/bin/pjdfstest" -c "$CONF" -p "$WORK/mnt/pjdfstest" >"$log" 2>&1) || true

  status "$log" ok >"$WORK/basalt.ok"
  comm -23 "$WORK/ext4.ok" "$WORK/basalt.ok" >"$WORK/regressed"
  comm -23 "$WORK/regressed" "$WORK/excluded" >"$WORK/unexpected"
  echo "pjdfstest basalt ($label): $(grep '^Summary' "$log" || echo 'no summary')"
  echo "pjdfstest ($label): $(wc -l <"$WORK/ext4.ok") pass on ext4; $(wc -l <"$WORK/regressed") of them do not pass on Basalt ($(comm -12 "$WORK/regressed" "$WORK/excluded" | wc -l) excluded)"
  if [ -s "$WORK/unexpected" ]; then
    echo "pjdfstest ($label): cases passing on ext4 but not on Basalt (not excluded):"
    sed 's/^/  /' "$WORK/unexpected"
    grep -A6 -F -f "$WORK/unexpected" "$log" | head -200
    PJD_FAILED=1
  fi

  # fsx: fixed seed, then a random one.
  mkdir "$WORK/mnt/fsx"
  echo "fsx ($label): seed 1, $fsx_ops operations"
  if ! "$TOOLS/bin/fsx" -q -f "$HERE/fsx.toml" -N "$fsx_ops" -S 1 -P "$WORK" "$WORK/mnt/fsx/fixed" >"$WORK/fsx1.log" 2>&1; then
    tail -40 "$WORK/fsx1.log"; FSX_FAILED=1
  fi
  local seed=$(( (RANDOM << 15) | RANDOM ))
  echo "fsx ($label): random seed $seed, $FSX_RANDOM_OPS operations"
  if ! "$TOOLS/bin/fsx" -q -f "$HERE/fsx.toml" -N "$FSX_RANDOM_OPS" -S "$seed" -P "$WORK" "$WORK/mnt/fsx/random" >"$WORK/fsx2.log" 2>&1; then
    tail -40 "$WORK/fsx2.log"; FSX_FAILED=1
  fi

  # Clean unmount from outside: the daemon flushes, syncs and exits 0.
  fusermount3 -u "$WORK/mnt"
  wait "$DEVPID"; DEVPID=""
  grep -h "served over io_uring\|io_uring queue" "$WORK/dev.log" || true
}

status() { awk -v s="$2" '$NF == s {print $1}' "$1" | sort -u; }
status "$WORK/ext4.log" ok >"$WORK/ext4.ok"
sed 's/#.*//' "$HERE/pjdfstest-exclusions.txt" | awk 'NF {print $1}' | sort -u >"$WORK/excluded"
echo "pjdfstest ext4:   $(grep '^Summary' "$WORK/ext4.log" || echo 'no summary')"
if [ "$(wc -l <"$WORK/ext4.ok")" -lt 100 ]; then
  echo "pjdfstest: the ext4 reference run passed almost nothing; see below"
  tail -20 "$WORK/ext4.log"
  PJD_FAILED=1
fi

basalt_pass dev-fuse "" "$FSX_OPS"
if fuse_uring_present; then
  fuse_uring_set Y
  basalt_pass io_uring io_uring=same "$FSX_RANDOM_OPS"
  fuse_uring_restore
else
  echo "test-fusefs: io_uring pass SKIPPED: this kernel has no FUSE over io_uring ($FUSE_URING_SWITCH)"
fi

passed=$(( 2 - PJD_FAILED - FSX_FAILED ))
echo "test-fusefs: pjdfstest $([ $PJD_FAILED = 0 ] && echo ok || echo FAILED), fsx $([ $FSX_FAILED = 0 ] && echo ok || echo FAILED)"
echo "$passed passed, $(( PJD_FAILED + FSX_FAILED )) failed"
[ $(( PJD_FAILED + FSX_FAILED )) -eq 0 ]
