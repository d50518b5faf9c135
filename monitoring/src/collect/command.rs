//! Runs an external tool with a timeout, mapping "not installed" and "denied" to clear errors.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::MonitoringError;

/// Captured result of a tool run.
#[derive(Debug)]
pub struct ToolOutput {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args…`, returning its output; `device` is only used in error messages.
pub fn run_tool(
    program: &str,
    args: &[&str],
    device: &str,
    timeout: Duration,
) -> Result<ToolOutput, MonitoringError> {
    let tool_err = |message: String| MonitoringError::Tool {
        tool: program.to_string(),
        device: device.to_string(),
        message,
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                tool_err(format!("`{program}` is not installed or not in PATH"))
            }
            std::io::ErrorKind::PermissionDenied => {
                tool_err(format!("permission denied running `{program}`"))
            }
            _ => tool_err(format!("cannot start `{program}`: {e}")),
        })?;
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(tool_err(format!("timed out after {} s", timeout.as_secs())));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(tool_err(format!("wait failed: {e}"))),
        }
    };
    Ok(ToolOutput {
        status: status.code(),
        stdout: out_thread.join().unwrap_or_default(),
        stderr: err_thread.join().unwrap_or_default(),
    })
}
