#!/usr/bin/env python3
"""SQLite commits per second on one file system: a database in WAL mode with
synchronous=full (each commit appends its frame to the write-ahead log and fsyncs it),
one 200-byte row per commit, after 200 rows of warm-up; the integrity check must pass.

Usage: sqlite-commits.py DB_PATH COMMITS  ->  prints commits/s (removes DB_PATH*)
"""
import glob
import os
import sqlite3
import sys
import time


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    db = sqlite3.connect(path, isolation_level=None)
    if db.execute("pragma journal_mode=wal").fetchone()[0] != "wal":
        sys.exit(f"sqlite-commits: {path}: WAL mode refused")
    db.execute("pragma synchronous=full")
    db.execute("create table t(k integer primary key, v text)")
    for _ in range(200):
        db.execute("insert into t(v) values (?)", ("w" * 200,))
    start = time.perf_counter()
    for _ in range(n):
        db.execute("insert into t(v) values (?)", ("c" * 200,))
    took = time.perf_counter() - start
    ok = db.execute("pragma integrity_check").fetchone()[0]
    db.close()
    for f in glob.glob(path + "*"):
        os.remove(f)
    if ok != "ok":
        sys.exit(f"sqlite-commits: {path}: integrity check: {ok}")
    print(f"{n / took:.1f}")


if __name__ == "__main__":
    main()
