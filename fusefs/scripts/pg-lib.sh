# Sourced, not run, by the fusefs scripts that run PostgreSQL on a mount
# (test-postgres.sh, bench-fusefs.sh). The server runs as user `postgres`, listens on
# a Unix socket only, in a directory of the caller's choosing (no TCP port to clash).
#   PG_BIN                 the server's binaries (the newest /usr/lib/postgresql/*/bin)
#   pg_as CMD...           runs CMD as user postgres
#   pg_init DATA           initdb with data checksums into DATA (its parent must exist
#                          and be reachable by postgres)
#   pg_start DATA SOCK     starts the server on DATA, socket and log in SOCK (created,
#                          owned by postgres); waits until it accepts connections; the
#                          postmaster's pid goes to PG_PID
#   pg_stop DATA           fast shutdown, waits for it (PG_PID is cleared)
#   pg_kill                kill -9 of the postmaster PG_PID and all its children (each
#                          child is the leader of a session of its own, so not in the
#                          postmaster's process group)
#   pg_sql SOCK SQL        runs SQL (psql -At, stops at the first error) and prints rows
#   pgbench_run SOCK LOG ARGS...  pgbench ARGS against the server at SOCK, output to LOG
#                          (printed, and status 1, when pgbench fails)
#   pgbench_tps LOG        the tps pgbench printed in LOG (empty if none)
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$PG_BIN" ] || ! [ -x "$PG_BIN/initdb" ]; then
  echo "PostgreSQL server binaries not found under /usr/lib/postgresql (Debian package postgresql; make deps installs it)" >&2
  exit 1
fi
pg_as() { runuser -u postgres -- "$@"; }
pg_init() {
  install -d -o postgres -m 700 "$1"
  pg_as "$PG_BIN/initdb" -D "$1" --data-checksums --auth=trust >/dev/null
}
pg_start() {
  local data=$1 sock=$2
  install -d -o postgres -m 755 "$sock"
  # pg_ctl's own words (e.g. that a killed server left its pid file) only on failure.
  pg_as "$PG_BIN/pg_ctl" -D "$data" -l "$sock/server.log" -w -t 120 \
    -o "-c listen_addresses='' -c unix_socket_directories='$sock'" start >"$sock/pg_ctl.out" 2>&1 || {
    cat "$sock/pg_ctl.out"
    tail -30 "$sock/server.log"
    return 1
  }
  PG_PID=$(head -1 "$data/postmaster.pid")
}
pg_stop() {
  pg_as "$PG_BIN/pg_ctl" -D "$1" -m fast -w -t 120 stop >/dev/null
  PG_PID=""
}
pg_kill() {
  if [ -n "${PG_PID:-}" ]; then
    local all="$PG_PID $(pgrep -P "$PG_PID" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -9 $all 2>/dev/null || true
    # Gone within 10 s (a process waiting on a dead mount is woken by its abort).
    for p in $all; do
      for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    done
    PG_PID=""
  fi
}
pg_sql() { pg_as "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$1" -d postgres -c "$2"; }
pgbench_run() {
  local sock=$1 log=$2
  shift 2
  pg_as "$PG_BIN/pgbench" -h "$sock" "$@" postgres >"$log" 2>&1 || {
    cat "$log"
    return 1
  }
}
pgbench_tps() { awk '/^tps = / {print $3}' "$1" | tail -1; }
