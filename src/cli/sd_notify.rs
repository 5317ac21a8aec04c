//! systemd's readiness protocol for `mount --foreground` under a unit with
//! `Type=notify`: `READY=1` (with a `STATUS=` line) once the mount is live,
//! `STOPPING=1` when it ends, as datagrams to `$NOTIFY_SOCKET` (a path, or
//! an abstract name written with a leading `@`). Without `$NOTIFY_SOCKET`
//! nothing is sent.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Send `state` (newline-separated `KEY=VALUE` lines); errors are logged,
/// never fatal (a supervisor that stopped listening must not stop the
/// mount).
pub(crate) fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = (|| -> std::io::Result<()> {
        let sock = UnixDatagram::unbound()?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(&path)?,
        };
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    if let Err(e) = sent {
        tracing::warn!("cannot notify systemd ({}): {e}", path.to_string_lossy());
    }
}
