//! systemd's `sd_notify` protocol: one datagram to `$NOTIFY_SOCKET` (path or abstract `@name`).
//! Without the variable (not under systemd) every call does nothing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `READY=1\nSTATUS=serving`); returns whether systemd was told.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let path = path.to_string_lossy().into_owned();
    let sent = (|| -> std::io::Result<()> {
        let sock = UnixDatagram::unbound()?;
        if let Some(name) = path.strip_prefix('@') {
            let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        } else {
            sock.send_to(state.as_bytes(), &path)?;
        }
        Ok(())
    })();
    match sent {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("sd_notify to {path} failed: {e}");
            false
        }
    }
}

/// `READY=1` with a status line.
pub fn ready(status: &str) -> bool {
    notify(&format!("READY=1\nSTATUS={status}"))
}

/// `RELOADING=1` with the monotonic timestamp systemd expects for Type=notify-reload.
pub fn reloading() -> bool {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let usec = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"))
}

/// `STOPPING=1`.
pub fn stopping() -> bool {
    notify("STOPPING=1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_reaches_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&p).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &p);
        assert!(ready("serving"));
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
        assert!(!ready("nobody listens"));
    }
}
