//! `basalt changes --collection C [--data DIR] [--since SEQNO] [--follow]`: the change feed
//! as JSON lines `{"seqno","collection","op","key"|"key_b64","value"|"value_b64"}`.
//! A stopped data directory is read directly; a running one (and `--follow`) through the
//! service's `/api/changes`.

use crate::cli::ChangesArgs;
use crate::{http, store};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::time::Duration;

const PAGE: usize = 10_000;

pub fn run(args: &ChangesArgs, out: &mut dyn Write) -> Result<i32> {
    if let Some(dir) = &args.data {
        if !dir.is_dir() {
            bail!("data directory {} does not exist", dir.display());
        }
        let in_use = store::ensure_unlocked(dir).is_err();
        if args.follow && !in_use {
            bail!(
                "nothing is serving {}: --follow reads new changes from the running service \
                 (basalt up / serve); without --follow the stored changes are printed",
                dir.display()
            );
        }
        if !in_use {
            let db = store::open(dir, store::offline_options())?;
            for c in db.collection(&args.collection)?.changes(args.since)? {
                writeln!(out, "{}", http::change_json(&c?))?;
            }
            out.flush()?;
            return Ok(0);
        }
    }
    remote(args, out)
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn remote(args: &ChangesArgs, out: &mut dyn Write) -> Result<i32> {
    let base = args.url.trim_end_matches('/');
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let mut since = args.since;
    loop {
        let url = format!(
            "{base}/api/changes?collection={}&since={since}&limit={PAGE}",
            encode(&args.collection)
        );
        let mut req = agent.get(&url);
        if let Some(t) = &args.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let body = match req.call() {
            Ok(r) => r.into_string().context("reading the change feed")?,
            Err(ureq::Error::Status(code, r)) => {
                let msg = r.into_string().unwrap_or_default();
                bail!("{url}: HTTP {code}: {}", msg.trim());
            }
            Err(e) => bail!(
                "cannot reach the running service at {base} ({e}); is `basalt up` or `basalt serve` running? (--url)"
            ),
        };
        let mut n = 0;
        for line in body.lines().filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).context("bad change line")?;
            since = since.max(v["seqno"].as_u64().unwrap_or(since));
            writeln!(out, "{line}")?;
            n += 1;
        }
        out.flush()?;
        if n < PAGE {
            if !args.follow {
                return Ok(0);
            }
            std::thread::sleep(Duration::from_millis(args.poll_ms.max(10)));
        }
    }
}
