//! Alerts on status changes (ok → warn → crit and back): logged, and optionally sent to a
//! webhook (HTTP POST of JSON) and/or passed to a command.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::{HealthRecord, Status};

/// `[alerts]` config section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertConfig {
    /// POST each transition as JSON to this URL.
    pub webhook_url: Option<String>,
    /// Run this via `sh -c` for each transition; JSON on stdin, and the environment variables
    /// BASALT_DEVICE, BASALT_MODEL, BASALT_SERIAL, BASALT_FROM, BASALT_TO, BASALT_REASONS.
    pub command: Option<String>,
    pub timeout_secs: u64,
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            webhook_url: None,
            command: None,
            timeout_secs: 10,
        }
    }
}

/// A device's status changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub device: String,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub from: Status,
    pub to: Status,
    pub reasons: Vec<String>,
    /// Unix seconds.
    pub at: i64,
}

/// Remembers each device's last status. A device seen for the first time counts as coming from
/// `ok`, so a device that is already failing when monitoring starts raises one alert.
#[derive(Debug, Default)]
pub struct AlertTracker {
    last: HashMap<String, Status>,
}

impl AlertTracker {
    /// Records the current statuses and returns the transitions since the previous call.
    pub fn observe(&mut self, records: &[HealthRecord], now: i64) -> Vec<Transition> {
        let mut out = Vec::new();
        for r in records {
            let prev = self
                .last
                .insert(r.device.clone(), r.status)
                .unwrap_or(Status::Ok);
            if prev != r.status {
                out.push(Transition {
                    device: r.device.clone(),
                    model: r.model.clone(),
                    serial: r.serial.clone(),
                    from: prev,
                    to: r.status,
                    reasons: r.reasons.clone(),
                    at: now,
                });
            }
        }
        out
    }
}

/// Logs a transition and delivers it to the configured webhook and command. Returns one error
/// message per failed delivery (also logged); never panics.
pub fn deliver(cfg: &AlertConfig, t: &Transition) -> Vec<String> {
    let msg = format!(
        "{}: {} -> {}{}",
        t.device,
        t.from.as_str(),
        t.to.as_str(),
        if t.reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.reasons.join("; "))
        }
    );
    match t.to {
        Status::Ok => tracing::info!(target: "basalt::alerts", "{msg}"),
        Status::Warn => tracing::warn!(target: "basalt::alerts", "{msg}"),
        Status::Crit => tracing::error!(target: "basalt::alerts", "{msg}"),
    }
    let body = serde_json::to_string(t).unwrap_or_default();
    let timeout = Duration::from_secs(cfg.timeout_secs.max(1));
    let mut errors = Vec::new();
    if let Some(url) = &cfg.webhook_url {
        let agent = ureq::AgentBuilder::new().timeout(timeout).build();
        if let Err(e) = agent
            .post(url)
            .set("Content-Type", "application/json")
            .send_string(&body)
        {
            errors.push(format!("webhook {url}: {e}"));
        }
    }
    if let Some(cmd) = &cfg.command {
        if let Err(e) = run_command(cmd, t, &body, timeout) {
            errors.push(format!("alert command `{cmd}`: {e}"));
        }
    }
    for e in &errors {
        tracing::warn!(target: "basalt::alerts", "delivery failed: {e}");
    }
    errors
}

fn run_command(cmd: &str, t: &Transition, body: &str, timeout: Duration) -> Result<(), String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("BASALT_DEVICE", &t.device)
        .env("BASALT_MODEL", t.model.as_deref().unwrap_or(""))
        .env("BASALT_SERIAL", t.serial.as_deref().unwrap_or(""))
        .env("BASALT_FROM", t.from.as_str())
        .env("BASALT_TO", t.to.as_str())
        .env("BASALT_REASONS", t.reasons.join("; "))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(body.as_bytes());
    }
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => return Err(format!("exited with {st}")),
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {} s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
}
