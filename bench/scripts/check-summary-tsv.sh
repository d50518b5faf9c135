#!/usr/bin/env bash
# Checks a compare summary.tsv: exact header, and a row for every engine and step of the suite.
#   bench/scripts/check-summary-tsv.sh SUMMARY.TSV
set -euo pipefail
tsv=$1
want_header=$'engine\tstep\tops_sec\tmb_sec\tp50\tp99\tp99.9\tp99.99\twrite_amp\tspace_amp\tdev_write_bytes_per_op\tdev_read_bytes_per_op\tcpu_us_per_op\trss_bytes\tdisk_bytes\tstall_pct'
[ "$(head -1 "$tsv")" = "$want_header" ] || { echo "bad header in $tsv: $(head -1 "$tsv")"; exit 1; }
steps="fillseq readrandom readhot fwdrange multireadrandom overwritesome waitforcompaction readwhilewriting fwdrangewhilewriting overwrite"
# The Basalt side must be the real engine (rows named "basalt"), never a stand-in.
basalt_side=basalt
passed=0; failed=0
check() { # engine step
  if awk -F'\t' -v e="$1" -v s="$2" '$1==e && $2==s {found=1} END{exit !found}' "$tsv"; then
    passed=$((passed+1))
  else
    echo "missing row: engine=$1 step=$2"; failed=$((failed+1))
  fi
}
for s in $steps; do check "$basalt_side" "$s"; check rocksdb "$s"; done
for s in write-1m read-1m randread-4k-qd1 randread-4k-qd32; do check fio "$s"; done
# The Basalt side is the real engine: no row of the in-memory test double.
if awk -F'\t' 'NR>1 && $1=="memtest" {found=1} END{exit !found}' "$tsv"; then
  echo "memtest rows in a report of the real engine"; failed=$((failed+1))
else passed=$((passed+1)); fi
# Every engine's raw output is kept beside the summary.
raw="$(dirname "$tsv")/raw"
if [ -d "$raw" ] && [ -n "$(ls -A "$raw")" ]; then passed=$((passed+1)); else
  echo "no raw outputs in $raw"; failed=$((failed+1)); fi
# Measured steps must have a throughput.
empty=$(awk -F'\t' 'NR>1 && $2!="waitforcompaction" && $3=="" {print $1" "$2}' "$tsv")
if [ -n "$empty" ]; then echo "rows without ops_sec: $empty"; failed=$((failed+1)); fi
echo "summary.tsv: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
