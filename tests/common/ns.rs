//! Scripts run as root in a private mount namespace (`unshare -m
//! --propagation private`), the way Docker and Podman run a privileged
//! task, optionally with `fusermount3` covered by `/dev/null` (a host
//! without the fuse3 package). A mount made inside is visible only there.
//!
//! Each script gets `$ZONEMOUNT` (the binary under test) and `$ZM_PIDS`, a
//! file to append the pid of every process it leaves running (a daemon, a
//! `run`): the [`PrivateNs`] guard SIGKILLs exactly those on drop (on
//! panic too), and each one's watcher then unmounts what it left, so the
//! namespace ends with its last process. Scripts also unmount their
//! mounts by exact path before they exit.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::run::{BIN, CMD_TIMEOUT, Out, run};

/// Covers every `fusermount3` this machine has with `/dev/null` (a bind
/// mount, visible in this namespace only), and fails if one still runs.
pub const HIDE_FUSERMOUNT: &str = r#"
for f in /usr/bin/fusermount3 /bin/fusermount3 /usr/local/bin/fusermount3 "$(command -v fusermount3)"; do
    [ -n "$f" ] && [ -f "$f" ] && mount --bind /dev/null "$f"
done
if command -v fusermount3 >/dev/null 2>&1 && fusermount3 -V >/dev/null 2>&1; then
    echo "fusermount3 still usable" >&2; exit 90
fi
"#;

/// Detaches, in a new private mount namespace, the copies it got of every
/// zonemount mount made before it (other tests' mounts; the originals stay,
/// propagation being private). A copy held here would keep another test's
/// daemon serving after that test unmounts (its `unmount` then fails:
/// "has not exited after 10 s").
pub const DROP_INHERITED_MOUNTS: &str = r#"
awk '$0 ~ / - fuse[.]zonemount / { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
done
"#;

/// A private mount namespace's scratch dir and the processes its scripts
/// left running.
pub struct PrivateNs {
    pub dir: TempDir,
    pub hide_fusermount: bool,
}

impl PrivateNs {
    pub fn new(hide_fusermount: bool) -> PrivateNs {
        let dir = tempfile::Builder::new()
            .prefix("zonemount-ns-test.")
            .tempdir()
            .expect("tempdir");
        PrivateNs {
            dir,
            hide_fusermount,
        }
    }

    /// The scratch dir (canonical).
    pub fn path(&self) -> PathBuf {
        fs::canonicalize(self.dir.path()).expect("canonical tempdir")
    }

    fn pids_file(&self) -> PathBuf {
        self.dir.path().join(".pids")
    }

    /// `unshare -m --propagation private sh -c SCRIPT` (after hiding
    /// fusermount3 when asked), cwd the scratch dir.
    pub fn command(&self, script: &str) -> Command {
        let mut full = String::from("set -u\n");
        full.push_str(DROP_INHERITED_MOUNTS);
        if self.hide_fusermount {
            full.push_str(HIDE_FUSERMOUNT);
        }
        full.push_str(script);
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(full)
            .current_dir(self.path())
            .env("ZONEMOUNT", BIN)
            .env("ZM_PIDS", self.pids_file())
            .env("LC_ALL", "C");
        cmd
    }

    /// Run `script` to its end (bounded).
    pub fn run(&self, script: &str) -> Out {
        run(&mut self.command(script), CMD_TIMEOUT)
    }

    /// Run `script` (bounded) where the mounts it lists are its own: as
    /// root in this private mount namespace; as an ordinary user (who
    /// can't make one) with a runtime dir of its own, so the registry of
    /// live mounts holds only what the script mounts.
    pub fn run_own_registry(&self, script: &str) -> Out {
        if rustix::process::geteuid().is_root() {
            return self.run(script);
        }
        let runtime = tempfile::tempdir().expect("runtime dir");
        let mut c = Command::new("sh");
        c.args(["-c", &format!("set -u\n{script}")])
            .current_dir(self.path())
            .env("ZONEMOUNT", BIN)
            .env("ZM_PIDS", self.pids_file())
            .env("XDG_RUNTIME_DIR", runtime.path());
        run(&mut c, CMD_TIMEOUT)
    }

    /// Start `script` in the background (output to files in the scratch
    /// dir: `out` and `err`).
    pub fn spawn(&self, script: &str) -> Child {
        let out = fs::File::create(self.dir.path().join("out")).expect("out");
        let err = fs::File::create(self.dir.path().join("err")).expect("err");
        self.command(script)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn unshare")
    }

    /// What a [`PrivateNs::spawn`]ed script wrote.
    pub fn output(&self) -> (String, String) {
        let read = |n: &str| fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        (read("out"), read("err"))
    }
}

impl Drop for PrivateNs {
    fn drop(&mut self) {
        let pids = fs::read_to_string(self.pids_file()).unwrap_or_default();
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            // Only a process of ours (a reused pid is someone else's).
            let ours = fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("zonemount"));
            if ours && Path::new(&format!("/proc/{pid}")).exists() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        // Bounded: let the watchers finish their lazy unmounts.
        std::thread::sleep(Duration::from_millis(200));
    }
}
