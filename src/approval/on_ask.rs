//! `--on-ask CMD`: tell someone that a worker is waiting on them.
//!
//! CMD is split like a shell would split words (quotes respected) but runs
//! without a shell. It gets the request in its environment (`ZONEMOUNT_ID`,
//! `ZONEMOUNT_ZONE`, `ZONEMOUNT_CLASS`, `ZONEMOUNT_OP`, `ZONEMOUNT_PATH`,
//! `ZONEMOUNT_TARGET`, `ZONEMOUNT_PID`, `ZONEMOUNT_UID`, `ZONEMOUNT_CMDLINE`,
//! `ZONEMOUNT_TIME`, `ZONEMOUNT_MOUNT`) and as one JSON line on stdin. It
//! runs on a thread of its own: it never blocks or decides the request, and
//! its failure is only logged. What the worker named (path, target,
//! command line) is escaped in the environment, as in every human view
//! (a hook tends to show it: a notification, a chat message); the JSON
//! line has it exact.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Listener;
use super::{Event, RequestInfo};

/// How long a hook may run before it is killed.
const HOOK_LIMIT: Duration = Duration::from_secs(60);

/// Split `cmd` into program and arguments; None if empty or unbalanced.
pub fn parse(cmd: &str) -> Option<Vec<String>> {
    let argv = shlex::split(cmd)?;
    (!argv.is_empty()).then_some(argv)
}

/// The environment a hook gets for `info`.
pub fn environment(info: &RequestInfo, mountpoint: &std::path::Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("ZONEMOUNT_ID", info.id.to_string()),
        ("ZONEMOUNT_ZONE", info.zone.clone()),
        ("ZONEMOUNT_CLASS", info.class.clone()),
        ("ZONEMOUNT_OP", info.op.clone()),
        ("ZONEMOUNT_PATH", info.shown_path()),
        ("ZONEMOUNT_PID", info.pid.to_string()),
        ("ZONEMOUNT_UID", info.uid.to_string()),
        ("ZONEMOUNT_CMDLINE", info.shown_cmdline()),
        ("ZONEMOUNT_TIME", info.time.clone()),
        ("ZONEMOUNT_MOUNT", mountpoint.display().to_string()),
    ];
    if let Some(t) = info.shown_target() {
        env.push(("ZONEMOUNT_TARGET", t));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

struct Hook {
    argv: Vec<String>,
    mountpoint: PathBuf,
}

impl Listener for Hook {
    fn event(&self, ev: &Event) {
        let Event::Requested(info) = ev else { return };
        let argv = self.argv.clone();
        let env = environment(info, &self.mountpoint);
        let json = crate::text::json_line(info).unwrap_or_default();
        let id = info.id;
        let spawned = std::thread::Builder::new()
            .name("zm-on-ask".into())
            .spawn(move || run(&argv, &env, &json, id));
        if let Err(e) = spawned {
            tracing::warn!(id, "--on-ask: cannot start a thread for the hook: {e}");
        }
    }
}

fn run(argv: &[String], env: &[(String, String)], json: &str, id: u64) {
    let Some((prog, args)) = argv.split_first() else {
        return;
    };
    let child = Command::new(prog)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(id, "--on-ask: cannot run {prog}: {e}");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that ignores its stdin is fine: a broken pipe is not a failure.
        let _ = stdin.write_all(json.as_bytes());
        let _ = stdin.write_all(b"\n");
    }
    let deadline = Instant::now() + HOOK_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return,
            Ok(Some(st)) => {
                tracing::warn!(id, "--on-ask: {prog} failed: {st}");
                return;
            }
            Ok(None) if Instant::now() >= deadline => {
                tracing::warn!(
                    id,
                    "--on-ask: {prog} still running after {HOOK_LIMIT:?}; killed"
                );
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                tracing::warn!(id, "--on-ask: waiting for {prog}: {e}");
                return;
            }
        }
    }
}

/// A listener that runs `argv` for every new request.
pub fn listener(argv: Vec<String>, mountpoint: PathBuf) -> Arc<dyn Listener> {
    Arc::new(Hook { argv, mountpoint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_words_without_a_shell() {
        assert_eq!(
            parse("notify-send 'agent blocked' --urgency=critical"),
            Some(vec![
                "notify-send".to_string(),
                "agent blocked".into(),
                "--urgency=critical".into()
            ])
        );
        assert_eq!(parse("   "), None);
        assert_eq!(parse("echo 'unbalanced"), None);
    }

    #[test]
    fn the_environment_has_names_escaped_and_the_json_has_them_exact() {
        let (path, path_b64) = crate::text::for_json(b"/w/a\x1b[2K\xff");
        let info = RequestInfo {
            path,
            path_b64,
            target: Some("/w/b\u{202e}".into()),
            cmdline: "vim\rnotes.md".into(),
            ..RequestInfo::default()
        };
        let env = environment(&info, std::path::Path::new("/m"));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ZONEMOUNT_PATH"), Some("/w/a\\x1b[2K\\xff"));
        assert_eq!(get("ZONEMOUNT_TARGET"), Some("/w/b\\u{202e}"));
        assert_eq!(get("ZONEMOUNT_CMDLINE"), Some("vim\\rnotes.md"));
        let json = serde_json::to_string(&info).unwrap_or_default();
        let back: RequestInfo = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back.path_bytes(), b"/w/a\x1b[2K\xff");
    }
}
