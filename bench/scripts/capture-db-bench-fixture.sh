#!/usr/bin/env bash
# Captures real db_bench (Debian rocksdb-tools) output as test fixtures, so the parser tests
# check our regexes against what db_bench really prints. Run once; commit the outputs.
#   bench/scripts/capture-db-bench-fixture.sh [DB_BENCH]
set -euo pipefail
DB_BENCH=${1:-db_bench}
here=$(cd "$(dirname "$0")/.." && pwd)
fx=$here/tests/fixtures
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=$("$DB_BENCH" --version 2>&1 | head -1)

args=(--db="$work/db" --benchmarks=fillseq,readrandom,multireadrandom,seekrandom,overwrite,readwhilewriting,stats
      --num=20000 --reads=20000 --batch_size=8 --seek_nexts=10 --seed=42 --histogram=1
      --compression_type=none)
out=$fx/db_bench_7.8_fillseq_readrandom.txt
{
  echo "# captured by bench/scripts/capture-db-bench-fixture.sh; $version"
  echo "# command: db_bench ${args[*]/$work/<tmp>} (stdout only)"
  "$DB_BENCH" "${args[@]}" 2>/dev/null
} > "$out"

args2=(--db="$work/db" --use_existing_db=1 --benchmarks=readrandom --num=20000 --duration=3
       --report_interval_seconds=1 --report_file="$work/report.csv" --seed=42)
"$DB_BENCH" "${args2[@]}" >/dev/null 2>&1
cp "$work/report.csv" "$fx/db_bench_7.8_report_file.csv"
echo "db_bench ${args2[*]/$work/<tmp>}" > "$fx/db_bench_7.8_report_file.cmd"
echo "wrote $out and $fx/db_bench_7.8_report_file.csv"
