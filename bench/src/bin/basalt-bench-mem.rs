//! `basalt-bench-mem`: the db_bench-compatible CLI of basalt-bench on the in-memory test
//! engine `memtest` (NOT Basalt). Used by the tests and as the stand-in "basalt command" of
//! the compare harness until the Basalt adapter exists.
//!
//!   basalt-bench-mem --benchmarks=fillseq,readrandom --num=1000 ...
//!   basalt-bench-mem compare --suite quick --out DIR [--basalt-cmd CMD...] ...

use basalt_bench::mem_engine::MemFactory;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if false {
        Ok::<(), basalt_bench::BenchError>(()).and_then(|_| {
            Ok(())
        })
    } else if args.first().map(String::as_str) == Some("--version") {
        println!("basalt-bench-mem {} (engine: memtest, in-memory test engine)", env!("CARGO_PKG_VERSION"));
        Ok(())
    } else {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        basalt_bench::run_bench(&args, &MemFactory::new(), &mut out)
    };
    if let Err(e) = result {
        eprintln!("basalt-bench-mem: error: {e}");
        std::process::exit(1);
    }
}
