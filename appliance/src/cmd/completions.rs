//! `basalt completions SHELL` and the hidden `basalt man --out DIR`.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;

pub fn run_completions(args: &CompletionsArgs, out: &mut dyn Write) -> Result<i32> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "basalt", out);
    Ok(0)
}

/// Writes `basalt.1` and `basalt-SUB.1` for every visible subcommand.
pub fn run_man(args: &ManArgs, out: &mut dyn Write) -> Result<i32> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let cmd = Cli::command();
    let mut pages = vec![("basalt".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("basalt-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, c) in pages {
        let path = args.out.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(c).render(&mut buf)?;
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(0)
}
