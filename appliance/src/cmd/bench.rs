//! `basalt bench ARGS` (db_bench flags on Basalt) and `basalt bench compare ...`.

use anyhow::Result;
use basalt_bench::basalt_adapter::BasaltFactory;
use basalt_bench::{CompareArgs, Flags};
use std::io::Write;

const HELP: &str = "\
Usage: basalt bench --db=DIR --benchmarks=STEP[,STEP...] [--num=N] [db_bench flags...]
       basalt bench compare --suite quick|standard --out DIR [--db-dir DIR] [--basalt-cmd 'CMD']
                            [--db-bench PATH] [--fio PATH] [--num N] [--seconds S]

Runs db_bench-compatible benchmarks on Basalt (collection \"bench\" in --db) and prints
db_bench's result lines; `compare` runs a suite against Basalt, RocksDB's db_bench and fio
and writes a report (summary.tsv, report.md, report.html). See bench/README.md.

Example: basalt bench --db=/tmp/b --benchmarks=fillseq,readrandom,stats --num=100000 --histogram=1
";

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        write!(out, "{HELP}\nFlags: ")?;
        writeln!(
            out,
            "{}",
            Flags::known_flags()
                .map(|f| format!("--{f}"))
                .collect::<Vec<_>>()
                .join(" ")
        )?;
        return Ok(if args.is_empty() { 2 } else { 0 });
    }
    if args[0] == "compare" {
        let mut a = CompareArgs::parse(&args[1..])?;
        if a.basalt_cmd.is_empty() {
            let me = std::env::current_exe()?;
            a.basalt_cmd = vec![me.display().to_string(), "bench".into()];
        }
        basalt_bench::run_compare(&a, out)?;
    } else {
        basalt_bench::run_bench(args, &BasaltFactory, out)?;
    }
    Ok(0)
}
