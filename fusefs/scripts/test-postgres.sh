#!/usr/bin/env bash
# PostgreSQL on a Basalt mount, crashed: initdb (data checksums) on the mount, then
# PG_CRASH_ROUNDS rounds (default 3) of pgbench (4 clients), a committer (psql, one
# row per commit, each id printed only once its COMMIT is acknowledged) and a loop of
# CHECKPOINTs, with the FUSE daemon killed (kill -9) at a random moment and the server
# killed after it. Each round then clears the dead mount, mounts the data again and
# starts the server, which recovers from its WAL, and checks: every acknowledged id is
# there (at most the one in flight beyond them), pgbench's branch, teller and account
# balances each equal the sum of its history, and pg_amcheck (heap and every index
# entry) finds nothing. At the end a clean stop, pg_checksums over every page, and a
# clean unmount. SEED=N repeats the crash moments of a run (printed). Needs root and
# /dev/fuse; skips (exit 0) with the reason printed when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${PG_CRASH_ROUNDS:-3}
SEED=${SEED:-$(((RANDOM << 15) | RANDOM))}

if [ "$(id -u)" -ne 0 ]; then echo "test-postgres: SKIPPED: needs root"; exit 0; fi
if ! [ -c /dev/fuse ]; then echo "test-postgres: SKIPPED: no /dev/fuse"; exit 0; fi
source fusefs/scripts/bench-lib.sh
source fusefs/scripts/pg-lib.sh

WORK=$(mktemp -d /tmp/basalt-pg-test.XXXXXX)
chmod 755 "$WORK" # the server runs as postgres and must reach the mount and its socket
MNT=$WORK/mnt SOCK=$WORK/sock
PGD=$MNT/pg/data
MOUNT_PID="" LOAD_PIDS=()
cleanup() {
  set +e
  for p in "${LOAD_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  pg_kill
  stop_mount "$MOUNT_PID" "$MNT"
  [ -n "${KEEP_WORK:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
mkdir "$MNT"
mount_data() { start_mount "$MNT" "$WORK/dev.log" mount --data "$WORK/data"; }
FAILED=0
fail() { echo "test-postgres: FAILED: $*"; FAILED=1; }

mount_data
mkdir "$MNT/pg" # the collection `pg`
chown postgres "$MNT/pg"
pg_init "$PGD"
pg_start "$PGD" "$SOCK"
pgbench_run "$SOCK" "$WORK/init.log" -i -q -s 2 || exit 1
pg_sql "$SOCK" "create extension amcheck; create table acked (id bigint primary key)"
echo "test-postgres: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on the mount, $ROUNDS crash rounds, seed $SEED"

RANDOM=$SEED # from here on the crash moments follow the seed
next=1
checkpoints_before=$(grep -c 'checkpoint complete' "$SOCK/server.log" || true)
for round in $(seq "$ROUNDS"); do
  # The load: pgbench without its vacuum (which would empty the history it is checked
  # against), the committer, and checkpoints (data files written and synced).
  pg_as "$PG_BIN/pgbench" -h "$SOCK" -n -c 4 -j 2 -T 600 postgres >"$WORK/pgbench.$round" 2>&1 &
  LOAD_PIDS=($!)
  seq "$next" $((next + 999999)) | sed 's/.*/insert into acked values (&) returning id;/' |
    pg_as "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -d postgres >"$WORK/acked.$round" 2>/dev/null &
  LOAD_PIDS+=($!)
  (while pg_sql "$SOCK" checkpoint 2>/dev/null; do sleep 0.3; done) &
  LOAD_PIDS+=($!)
  ms=$((1500 + RANDOM % 4000))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  kill -9 "$MOUNT_PID"
  wait "$MOUNT_PID" 2>/dev/null || true
  MOUNT_PID=""
  pg_kill
  for p in "${LOAD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  LOAD_PIDS=()
  acked=$(grep -c '^[0-9][0-9]*$' "$WORK/acked.$round" || true)
  checkpoints=$(($(grep -c 'checkpoint complete' "$SOCK/server.log" || true) - checkpoints_before))
  last=$((next + acked - 1))

  stop_mount "" "$MNT"
  mount_data
  t0=$(now)
  pg_start "$PGD" "$SOCK" || { fail "round $round: the server did not start after the crash"; break; }
  up=$(since "$t0")
  checkpoints_before=$(grep -c 'checkpoint complete' "$SOCK/server.log" || true)
  found=$(pg_sql "$SOCK" "select count(*) from acked where id between $next and $last")
  beyond=$(pg_sql "$SOCK" "select count(*) from acked where id > $last")
  echo "round $round: daemon killed after ${ms} ms of load ($checkpoints checkpoints completed); server recovered in ${up} s; $acked commits acknowledged, $found of them found, $beyond more committed unacknowledged"
  [ "$acked" -gt 0 ] || fail "round $round: no commit was acknowledged before the crash (the load did not run)"
  [ "$found" -eq "$acked" ] || fail "round $round: $((acked - found)) acknowledged commits are missing"
  [ "$beyond" -le 1 ] || fail "round $round: $beyond rows beyond the last acknowledged id (at most the one in flight may be there)"
  sums=$(pg_sql "$SOCK" "select (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers), (select sum(bbalance) from pgbench_branches), (select coalesce(sum(delta), 0) from pgbench_history), (select count(*) from pgbench_history)")
  IFS='|' read -r a t b h n <<<"$sums"
  echo "round $round: pgbench history $n transactions; balances accounts $a, tellers $t, branches $b, history $h"
  [ "$a" = "$h" ] && [ "$t" = "$h" ] && [ "$b" = "$h" ] || fail "round $round: balances disagree with the history"
  if pg_as "$PG_BIN/pg_amcheck" -h "$SOCK" -d postgres --heapallindexed >"$WORK/amcheck" 2>&1; then
    echo "round $round: pg_amcheck --heapallindexed: no corruption"
  else
    cat "$WORK/amcheck"
    fail "round $round: pg_amcheck reported corruption"
  fi
  next=$(($(pg_sql "$SOCK" "select coalesce(max(id), 0) from acked") + 1))
done

if [ "$FAILED" -eq 0 ]; then
  pg_stop "$PGD"
  if pg_as "$PG_BIN/pg_checksums" --check -D "$PGD" >"$WORK/checksums" 2>&1; then
    echo "pg_checksums: $(grep -E 'Blocks scanned' "$WORK/checksums" | tr -s ' '), $(grep -E 'Bad checksums' "$WORK/checksums" | tr -s ' ')"
  else
    cat "$WORK/checksums"
    fail "pg_checksums found bad pages"
  fi
  kill "$MOUNT_PID"
  wait "$MOUNT_PID" || fail "the daemon's clean unmount failed"
  MOUNT_PID=""
fi
echo "test-postgres: $([ "$FAILED" -eq 0 ] && echo ok || echo FAILED) (seed $SEED)"
[ "$FAILED" -eq 0 ]
