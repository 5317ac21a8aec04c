//! While CMD runs, each request that starts waiting is said on `run`'s
//! stderr (not with `-q`), with the command that decides it: a worker
//! whose supervisor doesn't know it asked would otherwise wait out its
//! `--approval-timeout` in silence.

use std::path::Path;

use crate::control::protocol::WatchEvent;

/// The line said for request `r`.
pub(super) fn line(r: &crate::approval::RequestInfo) -> String {
    let target = r
        .shown_target()
        .map(|t| format!(" -> {t}"))
        .unwrap_or_default();
    format!(
        "zonemount: run: request {id} waits for a decision ({class} {path}{target} by {cmd}): \
         `zonemount approvals allow {id}` (or `deny {id}`) from another terminal, or from this \
         shell if run is in the background; refused (EACCES) in {secs} s otherwise",
        id = r.id,
        class = r.class,
        path = r.shown_path(),
        cmd = r.shown_cmdline(),
        secs = r.timeout_secs,
    )
}

/// Watches the mount at `mountpoint` on a thread of its own, saying each
/// request as it starts waiting, until the daemon closes the connection.
/// Nothing is said when the mount can't be watched (the task goes on).
pub(super) fn announce(mountpoint: &Path) {
    let Ok(mut client) = super::super::approvals::connect(mountpoint) else {
        return;
    };
    if client.watch().is_err() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("run-asks".into())
        .spawn(move || {
            while let Ok(Some(ev)) = client.next_line() {
                if let Ok(WatchEvent::Request { request }) = serde_json::from_value(ev) {
                    eprintln!("{}", line(&request));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot watch the task's requests: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_request_is_said_with_the_command_that_decides_it() {
        let r = crate::approval::RequestInfo {
            id: 3,
            zone: "work".into(),
            class: "read".into(),
            op: "open".into(),
            path: "/work/.env\u{1b}[2K".into(),
            pid: 42,
            uid: 1000,
            cmdline: "cat .env".into(),
            time: "2025-01-01T00:00:00Z".into(),
            timeout_secs: 60,
            ..crate::approval::RequestInfo::default()
        };
        assert_eq!(
            line(&r),
            "zonemount: run: request 3 waits for a decision (read /work/.env\\x1b[2K by cat .env): \
             `zonemount approvals allow 3` (or `deny 3`) from another terminal, or from this shell \
             if run is in the background; refused (EACCES) in 60 s otherwise"
        );
    }
}
