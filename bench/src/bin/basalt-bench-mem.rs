//! `basalt-bench-mem`: the db_bench-compatible CLI of basalt-bench on the in-memory test
//! engine `memtest` (NOT Basalt). Used by the tests and as the stand-in "basalt command" of
//! the compare harness until the Basalt adapter exists.
//!
//!   basalt-bench-mem --benchmarks=fillseq,readrandom --num=1000 ...
//!   basalt-bench-mem compare --suite quick --out DIR [--basalt-cmd 'CMD ARGS'] ...
//!
//! In compare mode `--basalt-cmd` defaults to this program itself (so the "Basalt side" is
//! memtest, and the report says so).

use basalt_bench::compare::CompareArgs;
use basalt_bench::mem_engine::MemFactory;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("compare") => CompareArgs::parse(&args[1..]).and_then(|mut a| {
            if a.basalt_cmd.is_empty() {
                let me = std::env::current_exe()
                    .map_err(|e| basalt_bench::BenchError::io("current_exe", e))?;
                a.basalt_cmd = vec![me.display().to_string()];
            }
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            basalt_bench::run_compare(&a, &mut out).map(|_| ())
        }),
        Some("--version") => {
            println!(
                "basalt-bench-mem {} (engine: memtest, in-memory test engine)",
                env!("CARGO_PKG_VERSION")
            );
            Ok(())
        }
        _ => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            basalt_bench::run_bench(&args, &MemFactory::new(), &mut out)
        }
    };
    if let Err(e) = result {
        eprintln!("basalt-bench-mem: error: {e}");
        std::process::exit(1);
    }
}
