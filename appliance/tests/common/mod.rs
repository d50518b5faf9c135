//! Helpers shared by the appliance tests: run the built `basalt` binary, make data dirs.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

pub const BASALT: &str = env!("CARGO_BIN_EXE_basalt");

/// Runs `basalt ARGS` to completion.
pub fn basalt(args: &[&str]) -> Output {
    Command::new(BASALT)
        .args(args)
        .env_remove("BASALT_DATA")
        .env_remove("BASALT_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run basalt")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code, showing both streams on failure.
pub fn expect_code(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// Engine options for small test stores.
pub fn small_options() -> basalt_engine::Options {
    basalt_engine::Options {
        segment_size: 128 << 10,
        block_size: 2048,
        memory_budget: 8 << 20,
        durability: basalt_engine::Durability::NoSync,
        background_gc: false,
        compression: basalt_engine::Compression::None,
        ..Default::default()
    }
}

/// A store with collections `users` (200 keys, 3 versions each, 20 deleted) and `bin`
/// (binary keys and values), flushed and closed.
pub fn populate(dir: &Path) {
    let db = basalt_engine::Db::open(dir, small_options()).unwrap();
    let users = db.create_collection("users").unwrap();
    for round in 0..3u32 {
        for i in 0..200u32 {
            let v = format!(
                "{{\"user\":{i},\"round\":{round},\"pad\":\"{}\"}}",
                "x".repeat(300)
            );
            users
                .put(format!("user{i:04}").as_bytes(), v.as_bytes())
                .unwrap();
        }
        db.flush().unwrap();
    }
    for i in 0..20u32 {
        users.delete(format!("user{i:04}").as_bytes()).unwrap();
    }
    let bin = db.create_collection("bin").unwrap();
    for i in 0..50u8 {
        bin.put(&[0xff, i, 0], &[i, 0xfe, 0x80, i]).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
}
