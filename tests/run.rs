//! Issue 6: `zonemount run` (exit status, cleanup on every way out,
//! signals, timeout, `--isolate`, `--user`), `list` / `unmount --stale`,
//! and the scripts around them. Every test really mounts; each `run` gets
//! its own `TMPDIR`, so "no temp dir left" is "that dir is empty", and
//! "no mount left" is checked in /proc/mounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use tempfile::TempDir;

/// A project with a ro `data` zone and a rw `ws` zone, and a private TMPDIR
/// for `run`'s mountpoints.
struct Task {
    _tmp: TempDir,
    root: PathBuf,
    config: PathBuf,
    tmpdir: PathBuf,
}

impl Task {
    fn new() -> Task {
        Task::with_zones(&[("data", "mode: ro"), ("ws", "mode: rw")])
    }

    fn with_zones(zones: &[(&str, &str)]) -> Task {
        let tmp = tempfile::Builder::new()
            .prefix("zonemount-run-test.")
            .tempdir()
            .unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        // Other uids (--user) must be able to reach the mountpoint inside.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let config = root.join("project.yaml");
        fs::write(&config, zones_yaml(Mode::Sandboxed, zones)).unwrap();
        for (z, _) in zones {
            fs::create_dir_all(root.join(".sandbox").join(z)).unwrap();
        }
        fs::write(root.join(".sandbox/data/d.txt"), "d\n").ok();
        let tmpdir = root.join("tmp");
        fs::create_dir(&tmpdir).unwrap();
        fs::set_permissions(&tmpdir, fs::Permissions::from_mode(0o755)).unwrap();
        Task {
            _tmp: tmp,
            root,
            config,
            tmpdir,
        }
    }

    fn backing(&self, zone: &str, rel: &str) -> PathBuf {
        self.root.join(".sandbox").join(zone).join(rel)
    }

    /// `zonemount run --config C [default mount args] OPTS -- CMD...`.
    fn command(&self, opts: &[&str], cmd: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg("--config")
            .arg(&self.config)
            .args(default_mount_args())
            .args(opts)
            .arg("--")
            .args(cmd)
            .current_dir(&self.root)
            .env("TMPDIR", &self.tmpdir);
        c
    }

    fn run(&self, opts: &[&str], cmd: &[&str]) -> Out {
        run(&mut self.command(opts, cmd), Duration::from_secs(60))
    }

    fn sh(&self, opts: &[&str], script: &str) -> Out {
        self.run(opts, &["sh", "-c", script])
    }

    /// Mounts of ours still listed (anything under the fixture).
    fn our_mounts(&self) -> Vec<String> {
        let want = self.root.to_string_lossy().into_owned();
        fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|mp| mp.starts_with(&want))
            .map(str::to_string)
            .collect()
    }

    /// No mount and no temp dir left behind.
    #[track_caller]
    fn assert_clean(&self, ctx: &str) {
        assert!(
            self.our_mounts().is_empty(),
            "{ctx}: mounts left: {:?}",
            self.our_mounts()
        );
        let left = names(&self.tmpdir).unwrap();
        assert!(left.is_empty(), "{ctx}: temp dirs left: {left:?}");
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        for mp in self.our_mounts() {
            cleanup_mount(Path::new(&mp), true);
        }
    }
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

fn read_pid(p: &Path) -> u32 {
    fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

fn kill(sig: &str, pid: u32) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

fn bwrap_ok() -> bool {
    fuse_ok() && tool_ok("bwrap")
}

// ---------------------------------------------------------------------------
// Exit status and cleanup
// ---------------------------------------------------------------------------

/// CMD runs in a PID namespace of its own, where `$$` and `$!` are its
/// own numbers; `/proc` is still the host's, so `/proc/self` names a
/// process as this test sees it. CMD's host pid into `cmd.pid`.
const CMD_PID: &str = "read -r p _ < /proc/self/stat; echo $p > cmd.pid;";
/// A `sleep 60` left in the background, its host pid in `bg.pid`.
const BG_SLEEP: &str = "sh -c 'read -r p _ < /proc/self/stat; echo $p > bg.pid; exec sleep 60' &";

#[test]
fn exit_status_passes_through_and_nothing_is_left() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    for (script, want, ctx) in [
        ("true", 0, "normal exit"),
        ("exit 3", 3, "exit 3"),
        ("kill -KILL $$", 128 + 9, "SIGKILL of CMD"),
        ("kill -SEGV $$", 128 + 11, "crash (SIGSEGV)"),
    ] {
        let out = t.sh(&[], script);
        assert_eq!(out.code(), Some(want), "{ctx}: {}", out.describe());
        t.assert_clean(ctx);
    }
}

#[test]
fn cmd_runs_in_the_first_rw_zone_and_writes_reach_the_backing_dir() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(&[], "pwd; cat ../data/d.txt; echo hi > out.txt");
    assert!(out.success(), "{}", out.describe());
    let pwd = out.stdout.lines().next().unwrap();
    assert!(
        pwd.starts_with(&*t.tmpdir.to_string_lossy()) && pwd.ends_with("/ws"),
        "cwd {pwd}"
    );
    assert!(out.stdout.contains("d\n"));
    assert_eq!(
        fs::read_to_string(t.backing("ws", "out.txt")).unwrap(),
        "hi\n"
    );
    t.assert_clean("after a write");
}

#[test]
fn without_a_rw_zone_cmd_runs_at_the_root() {
    if !fuse_ok() {
        return;
    }
    let t = Task::with_zones(&[("data", "mode: ro")]);
    let out = t.sh(&[], "ls");
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout.trim(), "data");
    t.assert_clean("ro only");
}

#[test]
fn env_sets_variables_without_isolate() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(&["--env", "FOO=bar baz"], "echo \"$FOO\"");
    assert_eq!(out.stdout.trim(), "bar baz", "{}", out.describe());
}

#[test]
fn cmd_is_told_its_writable_and_readonly_paths() {
    if !fuse_ok() {
        return;
    }
    let t = Task::with_zones(&[
        ("data", "mode: ro"),
        ("ws", "mode: rw"),
        ("out", "mode: rw"),
    ]);
    let out = t.sh(
        &[],
        "echo \"root=$ZONEMOUNT_ROOT\"; echo \"rw=$ZONEMOUNT_WRITABLE\"; echo \"ro=$ZONEMOUNT_READONLY\"; \
         IFS=:; for d in $ZONEMOUNT_WRITABLE; do touch \"$d/probe\" && echo \"wrote $d\"; done; \
         for d in $ZONEMOUNT_READONLY; do touch \"$d/probe\" 2>/dev/null || echo \"refused $d\"; done",
    );
    assert!(out.success(), "{}", out.describe());
    let root = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("root="))
        .unwrap()
        .to_string();
    assert!(
        root.starts_with(&*t.tmpdir.to_string_lossy()),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("rw={root}/ws:{root}/out\n")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("ro={root}/data\n")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("wrote {root}/ws")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("wrote {root}/out")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("refused {root}/data")),
        "{}",
        out.stdout
    );
}

#[test]
fn processes_cmd_leaves_behind_are_killed() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    // CMD waits (bounded) until its child has said who it is: the PID
    // namespace's end would otherwise kill it before it could.
    let out = t.sh(
        &[],
        &format!(
            "{BG_SLEEP} i=0; until [ -s bg.pid ] || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done"
        ),
    );
    assert!(out.success(), "{}", out.describe());
    let bg = read_pid(&t.backing("ws", "bg.pid"));
    assert!(
        wait_until(Duration::from_secs(5), || !alive(bg)),
        "sleep {bg} survived"
    );
    t.assert_clean("background child");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let start = Instant::now();
    let out = t.sh(&["--timeout", "1"], &format!("{BG_SLEEP} sleep 60"));
    let took = start.elapsed();
    assert_eq!(out.code(), Some(128 + 15), "{}", out.describe());
    assert!(out.stderr.contains("timed out"), "{}", out.describe());
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let bg = read_pid(&t.backing("ws", "bg.pid"));
    assert!(
        wait_until(Duration::from_secs(5), || !alive(bg)),
        "sleep {bg} survived"
    );
    t.assert_clean("timeout");
}

#[test]
fn timeout_escalates_to_sigkill_when_sigterm_is_ignored() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(
        &["--timeout", "0.5"],
        "trap '' TERM; while :; do sleep 0.1; done",
    );
    assert_eq!(out.code(), Some(128 + 9), "{}", out.describe());
    t.assert_clean("ignored SIGTERM");
}

#[test]
fn sigterm_to_run_is_forwarded_and_everything_is_torn_down() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let mut child = t
        .command(&[], &["sh", "-c", &format!("{CMD_PID} exec sleep 60")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pidfile = t.backing("ws", "cmd.pid");
    assert!(
        wait_until(Duration::from_secs(20), || fs::read_to_string(&pidfile)
            .is_ok_and(|s| s.ends_with('\n'))),
        "CMD never started"
    );
    let cmd_pid = read_pid(&pidfile);
    kill("TERM", child.id());
    let st = wait_child(&mut child, Duration::from_secs(30)).expect("run did not exit");
    assert_eq!(st.code(), Some(128 + 15), "{st:?}");
    assert!(!alive(cmd_pid), "CMD {cmd_pid} survived");
    t.assert_clean("SIGTERM to run");
}

/// The one directory `run` made in the task's TMPDIR (its mountpoint).
fn task_mountpoint(t: &Task) -> PathBuf {
    let names = names(&t.tmpdir).unwrap();
    assert_eq!(
        names.len(),
        2,
        "one temp mountpoint and its refusal log: {names:?}"
    );
    let dir = names.iter().find(|n| !n.ends_with(".refusals")).unwrap();
    assert!(
        names.contains(&format!("{dir}.refusals")),
        "the refusal log beside it: {names:?}"
    );
    t.tmpdir.join(dir)
}

/// A `zonemount run` child, SIGKILLed on drop (on panic too): its
/// watcher then tears everything down.
struct RunChild(std::process::Child);

impl Drop for RunChild {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn sigkill_of_run_leaves_nothing() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let mut child = t
        .command(&[], &["sh", "-c", &format!("{CMD_PID} {BG_SLEEP} wait")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(RunChild)
        .unwrap();
    let bgfile = t.backing("ws", "bg.pid");
    assert!(
        wait_until(Duration::from_secs(20), || fs::read_to_string(&bgfile)
            .is_ok_and(|s| s.ends_with('\n'))),
        "CMD never started"
    );
    let cmd_pid = read_pid(&t.backing("ws", "cmd.pid"));
    let bg_pid = read_pid(&bgfile);
    let mp = task_mountpoint(&t);
    let rec = zonemount::mount::find_record(&mp).expect("the daemon's record");
    let sock = rec.control.clone().expect("a control socket");
    kill("KILL", child.0.id());
    let _ = wait_child(&mut child.0, Duration::from_secs(10));
    // The watcher: CMD's group killed, the daemon stopped (it unmounts
    // and removes its record and socket), the temp dir removed.
    let gone = wait_until(Duration::from_secs(30), || {
        !alive(cmd_pid)
            && !alive(bg_pid)
            && !alive(rec.pid)
            && t.our_mounts().is_empty()
            && names(&t.tmpdir).unwrap().is_empty()
    });
    assert!(!alive(cmd_pid), "CMD {cmd_pid} survived run's SIGKILL");
    assert!(!alive(bg_pid), "CMD's background child {bg_pid} survived");
    assert!(!alive(rec.pid), "the daemon {} survived", rec.pid);
    assert!(gone, "left behind after SIGKILL of run");
    t.assert_clean("SIGKILL of run");
    assert!(!sock.exists(), "control socket {} left", sock.display());
    assert!(
        zonemount::mount::find_record(&mp).is_none(),
        "record of {} left",
        mp.display()
    );
}

#[test]
fn sigkill_of_run_leaves_nothing_without_fusermount3() {
    if !(fuse_ok() && root_ok() && tool_ok("unshare")) {
        return;
    }
    let ns = PrivateNs::new(true);
    let out = ns.run(
        r#"
mkdir tmp
printf 'sandbox:\n  mode: sandboxed\n  zones:\n    ws: { mode: rw }\n' > project.yaml
TMPDIR="$PWD/tmp" "$ZONEMOUNT" run --config project.yaml --no-approvals -- \
    sh -c 'read -r p _ < /proc/self/stat; echo $p > cmd.pid; sh -c "read -r q _ < /proc/self/stat; echo \$q > bg.pid; exec sleep 60" & wait' >/dev/null 2>&1 &
run=$!
echo "$run" >> "$ZM_PIDS"
i=0; while [ ! -s .sandbox/ws/bg.pid ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
sleep 0.2
mp=$(ls -d "$PWD"/tmp/zonemount-run.*)
echo "type=$(grep " $mp " /proc/self/mounts | cut -d' ' -f3)"
rec=$(grep -l -F "\"$mp\"" /run/zonemount/mounts/*.json)
sock=$(sed -n 's/.*"control": "\(.*\)".*/\1/p' "$rec")
ps -eo pid=,args= | grep -F -- "$mp" | grep -v grep | awk '{print $1}' >> "$ZM_PIDS"
cmd=$(cat .sandbox/ws/cmd.pid); bg=$(cat .sandbox/ws/bg.pid)
kill -KILL "$run"
i=0
while {{ [ -n "$(ls tmp)" ] || kill -0 "$cmd" 2>/dev/null || kill -0 "$bg" 2>/dev/null || [ -e "$rec" ] || [ -e "$sock" ]; }} && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i+1))
done
echo "tmp=$(ls tmp | wc -l)"
echo "mounts=$(grep -c " $mp " /proc/self/mounts)"
kill -0 "$cmd" 2>/dev/null && echo "cmd=alive" || echo "cmd=gone"
kill -0 "$bg" 2>/dev/null && echo "bg=alive" || echo "bg=gone"
[ -e "$rec" ] && echo "record=left" || echo "record=gone"
[ -e "$sock" ] && echo "socket=left" || echo "socket=gone"
"#
        .replace("{{", "{")
        .replace("}}", "}")
        .as_str(),
    );
    assert!(out.success(), "{}", out.describe());
    for (k, v) in [
        ("type", "fuse.zonemount"),
        ("tmp", "0"),
        ("mounts", "0"),
        ("cmd", "gone"),
        ("bg", "gone"),
        ("record", "gone"),
        ("socket", "gone"),
    ] {
        assert!(
            out.stdout.lines().any(|l| l == format!("{k}={v}")),
            "want {k}={v}: {}",
            out.describe()
        );
    }
}

#[test]
fn failures_before_cmd_leave_nothing() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let out = t.run(&[], &["/nonexistent/program"]);
    assert_eq!(out.code(), Some(127), "{}", out.describe());
    t.assert_clean("CMD not found");
    let out = t.run(&["--bogus-option"], &["true"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(out.stderr.contains("--bogus-option"), "{}", out.describe());
    t.assert_clean("bad mount option");
    let out = t.run(&["--user", "nobody"], &["true"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    t.assert_clean("bad --user");
    let out = t.run(&["--timeout", "0"], &["true"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    // Never in effect under run (its refusal log needs the daemon): said,
    // not silently ignored.
    let out = t.run(&["--kernel-opens"], &["true"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stderr
            .contains("--kernel-opens never takes effect under run"),
        "{}",
        out.describe()
    );
    t.assert_clean("--kernel-opens");
    let out = run(
        t.command(&["--isolate"], &["true"])
            .env("PATH", "/nonexistent"),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("bubblewrap"), "{}", out.describe());
    t.assert_clean("no bwrap");
    fs::write(&t.config, "sandbox:\n  bogus: 1\n").unwrap();
    let out = t.run(&[], &["true"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    t.assert_clean("bad config");
}

// ---------------------------------------------------------------------------
// --isolate
// ---------------------------------------------------------------------------

/// What `ls /` may show besides the zones: the system dirs the host has.
fn system_names() -> BTreeSet<String> {
    let mut s: BTreeSet<String> = ["etc", "proc", "dev", "tmp"].map(String::from).into();
    for d in zonemount::isolate::SYSTEM_DIRS {
        if Path::new(d).is_dir() {
            s.insert(d.trim_start_matches('/').to_string());
        }
    }
    s
}

#[test]
fn isolate_root_shows_the_zones_and_system_dirs_only() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(&["--isolate"], "ls /; echo ---; pwd; id -u");
    assert!(out.success(), "{}", out.describe());
    let (ls, rest) = out.stdout.split_once("---\n").unwrap();
    let got: BTreeSet<String> = ls.lines().map(String::from).collect();
    let mut want = system_names();
    want.insert("data".into());
    want.insert("ws".into());
    assert_eq!(got, want);
    assert_eq!(rest.lines().next(), Some("/ws"));
    t.assert_clean("isolate");
}

#[test]
fn isolate_ro_zone_is_erofs_and_rw_zone_writes_through() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(&["--isolate"], "echo x > /data/y");
    assert_sh_errno(&out, libc::EROFS, "write into the ro zone");
    assert!(!t.backing("data", "y").exists());
    let out = t.sh(&["--isolate"], "echo x > /ws/y && cat /data/d.txt");
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout, "d\n");
    assert_eq!(fs::read_to_string(t.backing("ws", "y")).unwrap(), "x\n");
    t.assert_clean("isolate writes");
}

/// The sandbox's `/proc` is read-only: a root worker (uid 0 on the host,
/// without capabilities) could otherwise write host-wide kernel settings
/// under `/proc/sys` (`kernel.core_pattern`: a program of its own run as
/// host root). The probe writes the value that is there already, so a
/// write that got through changes nothing on this machine.
#[test]
fn isolate_proc_is_read_only_so_host_sysctls_stay_as_they_are() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let knob = "/proc/sys/kernel/printk_ratelimit";
    let out = t.sh(
        &["--isolate"],
        &format!("v=$(cat {knob}) && echo \"$v\" > {knob} && echo WROTE; echo 0 > /proc/self/oom_score_adj && echo WROTE-PROC"),
    );
    assert!(!out.stdout.contains("WROTE"), "{}", out.describe());
    let refused = ["Read-only file system", "Permission denied"];
    assert!(
        refused.iter().any(|r| out.stderr.contains(r)),
        "{}",
        out.describe()
    );
    t.assert_clean("isolate /proc");
}

/// A worker run by root under `--isolate` is uid 0 on the host without
/// capabilities: it may not make a file of a zone setuid root (or setgid
/// root and group-executable), which any user of the host could then run
/// as root (found by an attack pass: `chmod 4755` of a copy of `id`; and
/// by the next one: `chmod 2745`, then an access ACL giving the group
/// execute). A mode asked for at create loses those bits; a root worker
/// with its capabilities (plain `run`) may set them as on the host.
#[test]
fn a_root_worker_without_capabilities_cannot_make_a_setuid_root_file() {
    if !bwrap_ok() || !root_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(
        &["--isolate"],
        "cp /bin/true /ws/t; chmod 4755 /ws/t && echo SUID; chmod 2755 /ws/t && echo SGID; \
         chmod 755 /ws/t && echo plain; \
         python3 -c \"import os; os.close(os.open('/ws/n', os.O_CREAT | os.O_WRONLY, 0o6755))\"; \
         cp /bin/true /ws/g && chmod 2745 /ws/g && echo setgid-not-executable; \
         python3 -c \"import os, struct; e = lambda t, p: struct.pack('<HHI', t, p, 2**32 - 1); \
         os.setxattr('/ws/g', 'system.posix_acl_access', struct.pack('<I', 2) + e(1, 7) + e(4, 5) + e(32, 5)); \
         print('ACL')\"",
    );
    assert_eq!(
        out.stdout,
        "plain\nsetgid-not-executable\n",
        "{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("Operation not permitted"),
        "{}",
        out.describe()
    );
    let mode = |n: &str| fs::metadata(t.backing("ws", n)).unwrap().mode() & 0o7777;
    assert_eq!(mode("t"), 0o755);
    assert_eq!(
        mode("n"),
        0o755,
        "created 06755 by a worker without capabilities"
    );
    // An access ACL sets the group bits: one giving group execute to a
    // setgid-root file is refused as the chmod would be.
    assert_eq!(mode("g"), 0o2745, "{}", out.describe());
    assert!(
        out.stderr
            .contains("ws: through the daemon (kept on the daemon: CMD runs as root"),
        "{}",
        out.describe()
    );
    let out = t.sh(&[], "chmod 4755 t && echo SUID");
    assert_eq!(
        out.stdout,
        "SUID\n",
        "root with its capabilities: {}",
        out.describe()
    );
    assert_eq!(mode("t"), 0o4755);
    t.assert_clean("setuid root");
}

/// Only stdin, stdout and stderr reach CMD: an fd the caller of `run`
/// left open (here on a directory outside every zone) is a way out of the
/// sandbox (`/proc/self/fd/7/..`) or past `--user`'s rights, and stays
/// out of the daemon too.
#[test]
fn no_fd_the_caller_left_open_reaches_cmd_or_the_daemon() {
    if !fuse_ok() {
        return;
    }
    let t = Task::new();
    let secret = t.root.join("outside");
    fs::create_dir(&secret).unwrap();
    let mut cases: Vec<Vec<&str>> = vec![vec![]];
    if tool_ok("bwrap") {
        cases.push(vec!["--isolate"]);
    }
    if root_ok() {
        cases.push(vec!["--user", "65534:65534"]);
    }
    for opts in cases {
        let inner = t.command(
            &opts,
            &[
                "sh",
                "-c",
                "ls /proc/self/fd/7 >/dev/null 2>&1 && echo LEAKED; echo done",
            ],
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("exec 7<\"$0\"; exec \"$@\"")
            .arg(&secret)
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(&t.root)
            .env("TMPDIR", &t.tmpdir);
        let out = run(&mut c, Duration::from_secs(60));
        assert!(out.success(), "{opts:?}: {}", out.describe());
        assert_eq!(out.stdout, "done\n", "{opts:?}: {}", out.describe());
        t.assert_clean("inherited fd");
    }
    // A mount's daemon keeps none of its caller's fds either.
    let mnt = t.root.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("exec 7<\"$0\"; exec \"$@\"")
        .arg(&secret)
        .arg(BIN)
        .arg("mount")
        .arg("--config")
        .arg(&t.config)
        .args(default_mount_args())
        .arg(&mnt)
        .current_dir(&t.root)
        .env("TMPDIR", &t.tmpdir);
    let out = run(&mut c, Duration::from_secs(60));
    assert!(out.success(), "{}", out.describe());
    let status = run(
        Command::new(BIN).args(["status", "--json"]).arg(&mnt),
        Duration::from_secs(30),
    );
    let pid = serde_json::from_str::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|v| v["pid"].as_u64());
    let held: Vec<PathBuf> = pid
        .map(|p| {
            fs::read_dir(format!("/proc/{p}/fd"))
                .map(|d| {
                    d.filter_map(|e| fs::read_link(e.ok()?.path()).ok())
                        .collect()
                })
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let down = run(
        Command::new(BIN).arg("unmount").arg(&mnt),
        Duration::from_secs(30),
    );
    assert!(down.success(), "{}", down.describe());
    assert!(pid.is_some(), "the daemon's pid: {}", status.describe());
    assert!(!held.is_empty(), "the daemon's fds");
    assert!(
        !held.contains(&secret),
        "the daemon holds its caller's fd: {held:?}"
    );
}

/// `run OPTS -- CMD` from a shell that first opens `target` as
/// `redirect` says (`<` for stdin, `1<` for a directory as stdout, ...).
fn run_redirected(t: &Task, redirect: &str, target: &Path, opts: &[&str], cmd: &[&str]) -> Out {
    let inner = t.command(opts, cmd);
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("exec \"$@\" {redirect}\"$0\""))
        .arg(target)
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(&t.root)
        .env("TMPDIR", &t.tmpdir);
    run(&mut c, Duration::from_secs(60))
}

/// Reads stdin, then reopens it read-write through `/proc/self/fd/0`
/// and writes there; prints what stdin is, what it held, and whether the
/// reopen was let through.
const REOPEN_STDIN: &str = "import os, stat, sys
m = os.fstat(0).st_mode
kind = 'fifo' if stat.S_ISFIFO(m) else 'file' if stat.S_ISREG(m) else 'other'
data = sys.stdin.read()
try:
    fd = os.open('/proc/self/fd/0', os.O_RDWR)
    os.write(fd, b'OVERWRITTEN BY CMD')
    os.close(fd)
    w = 'reopened'
except OSError:
    w = 'refused'
print(kind, repr(data), w)";

/// A regular file as `run`'s stdin reaches CMD under `--isolate` (and
/// `--user`) as a pipe `run` feeds from it: CMD reads the file's content,
/// but can't reopen the host file read-write through `/proc/self/fd/0`
/// and rewrite it (found by an attack pass). CMD that doesn't read its
/// stdin, or stops early, still ends `run` promptly with its status.
/// Without a boundary (plain `run`), stdin is left as it is.
/// A worker run as root under `--isolate` is uid 0 on the host: the
/// owner of the host's device nodes bwrap binds into its `/dev`, and of a
/// FIFO root made and gave it as stdin. It could chmod them (found by an
/// attack pass: `chmod /dev/null` went through, `fchmod(0, 0o777)`
/// changed the host's FIFO). They are read-only to it now (EROFS) and
/// work as before. (The modes asked for are the ones they have: a
/// failing run changes nothing on the host.)
#[test]
fn an_isolated_root_cmd_cannot_chmod_the_hosts_devices_or_its_stdio_fifo() {
    if !bwrap_ok() || !tool_ok("python3") || !tool_ok("mkfifo") || !root_ok() {
        return;
    }
    let t = Task::new();
    let fifo = t.root.join("fifo");
    let made = Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let to = fifo.clone();
    // Its writer: the open waits until CMD's side opens it.
    let writer = std::thread::spawn(move || fs::write(&to, "hi\n"));
    let script = "import os, sys
print('stdin', sys.stdin.read().strip())
for p in ['/dev/null', '/dev/zero', '/dev/urandom']:
    try:
        os.chmod(p, 0o666)
        print(p, 'chmod let through')
    except OSError as e:
        print(p, e.errno)
try:
    os.fchmod(0, 0o600)
    print('stdin chmod let through')
except OSError as e:
    print('stdin', e.errno)
open('/dev/null', 'w').write('x')
print('wrote /dev/null', len(open('/dev/urandom', 'rb').read(8)))
";
    let out = run_redirected(&t, "<", &fifo, &["--isolate"], &["python3", "-c", script]);
    writer.join().unwrap().unwrap();
    assert!(out.success(), "{}", out.describe());
    let e = libc::EROFS;
    assert_eq!(
        out.stdout,
        format!(
            "stdin hi\n/dev/null {e}\n/dev/zero {e}\n/dev/urandom {e}\nstdin {e}\nwrote /dev/null 8\n"
        ),
        "{}",
        out.describe()
    );
    assert_eq!(
        fs::metadata(&fifo).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    // `/dev/null` as stdout: the same.
    let script = "import os
try:
    os.fchmod(1, 0o666)
    os.write(2, b'let through')
except OSError as e:
    os.write(2, str(e.errno).encode())
";
    let out = run_redirected(
        &t,
        ">",
        Path::new("/dev/null"),
        &["--isolate"],
        &["python3", "-c", script],
    );
    assert!(
        out.stderr.trim_end().ends_with(&format!("\n{e}")),
        "{}",
        out.describe()
    );
    t.assert_clean("devices and a FIFO");
}

#[test]
fn a_file_as_stdin_reaches_an_isolated_cmd_as_a_pipe() {
    if !bwrap_ok() || !tool_ok("python3") {
        return;
    }
    let t = Task::new();
    let mut cases: Vec<Vec<&str>> = vec![vec!["--isolate"]];
    if root_ok() {
        cases.push(vec!["--user", "65534:65534"]);
    }
    let input = t.root.join("input.txt");
    for opts in &cases {
        fs::write(&input, "host content\n").unwrap();
        fs::set_permissions(&input, fs::Permissions::from_mode(0o644)).unwrap();
        let out = run_redirected(&t, "<", &input, opts, &["python3", "-c", REOPEN_STDIN]);
        assert!(out.success(), "{opts:?}: {}", out.describe());
        assert_eq!(
            fs::read_to_string(&input).unwrap(),
            "host content\n",
            "{opts:?}: CMD rewrote the host file it had as stdin: {}",
            out.describe()
        );
        assert!(
            out.stdout.starts_with("fifo 'host content\\n' "),
            "{opts:?}: {}",
            out.describe()
        );
        t.assert_clean("a file as stdin");
    }
    // Plain run: CMD is not sandboxed, and its stdin is the file itself.
    let out = run_redirected(&t, "<", &input, &[], &["python3", "-c", REOPEN_STDIN]);
    assert!(
        out.stdout.starts_with("file 'host content\\n' "),
        "{}",
        out.describe()
    );
    // A stdin far larger than a pipe holds, which CMD doesn't read, or
    // reads 5 bytes of: CMD's status comes back at once, and the write
    // that fails (EPIPE) doesn't end `run`.
    let big = t.root.join("big");
    fs::write(&big, vec![b'x'; 8 << 20]).unwrap();
    for (cmd, code) in [("exit 7", 7), ("head -c 5 >/dev/null", 0)] {
        let start = Instant::now();
        let out = run_redirected(&t, "<", &big, &["--isolate"], &["sh", "-c", cmd]);
        assert_eq!(out.code(), Some(code), "{cmd}: {}", out.describe());
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{cmd}: took {:?}",
            start.elapsed()
        );
        t.assert_clean("a big stdin");
    }
}

/// A directory as `run`'s stdin gives an isolated CMD an empty stdin
/// (EOF at once; reading a directory is EISDIR anyway), never the
/// directory: through `/proc/self/fd/0/..` it walked the host outside the
/// sandbox, read what it liked and made files there (found by an attack
/// pass). A directory as stdout or stderr is refused before anything is
/// mounted (exit 2).
#[test]
fn a_directory_as_stdin_or_stdout_is_no_way_out_of_the_sandbox() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let outside = t.root.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), "s\n").unwrap();
    // Each command of the script has CMD's stdin as its fd 0.
    let script = "cat; echo read $?
        ls /proc/self/fd/0/ >/dev/null 2>&1 && echo listed the directory
        ls /proc/self/fd/0/.. >/dev/null 2>&1 && echo listed its parent
        cat /proc/self/fd/0/secret >/dev/null 2>&1 && echo read the secret
        touch /proc/self/fd/0/made 2>/dev/null && echo created
        touch /proc/self/fd/0/../made 2>/dev/null && echo created in its parent
        echo done";
    let before = (names(&t.root).unwrap(), names(&outside).unwrap());
    let mut cases: Vec<Vec<&str>> = vec![vec!["--isolate"]];
    if root_ok() {
        cases.push(vec!["--user", "65534:65534"]);
    }
    for opts in &cases {
        let out = run_redirected(&t, "<", &outside, opts, &["sh", "-c", script]);
        assert!(out.success(), "{opts:?}: {}", out.describe());
        assert_eq!(out.stdout, "read 0\ndone\n", "{opts:?}: {}", out.describe());
        assert_eq!(
            (names(&t.root).unwrap(), names(&outside).unwrap()),
            before,
            "{opts:?}: CMD made files on the host: {}",
            out.describe()
        );
        t.assert_clean("a directory as stdin");
    }
    for redirect in ["1<", "2<"] {
        let out = run_redirected(
            &t,
            redirect,
            &outside,
            &["--isolate"],
            &[
                "sh",
                "-c",
                "ls /proc/self/fd/1/.. /proc/self/fd/2/..; touch /proc/self/fd/1/made /proc/self/fd/2/made",
            ],
        );
        assert_eq!(out.code(), Some(2), "{redirect}: {}", out.describe());
        if redirect == "1<" {
            assert!(
                out.stderr.contains("stdout is a directory"),
                "{}",
                out.describe()
            );
        }
        assert_eq!(
            (names(&t.root).unwrap(), names(&outside).unwrap()),
            before,
            "{redirect}: CMD made files on the host: {}",
            out.describe()
        );
        t.assert_clean("a directory as stdout");
    }
}

#[test]
fn isolate_hides_homes_backing_dirs_and_the_host() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let probes: Vec<String> = [
        "/root".to_string(),
        "/home".into(),
        format!("{home}/.ssh"),
        format!("{home}/.ssh/id_rsa"),
        home.clone(),
        t.root.to_string_lossy().into(),
        t.backing("ws", "").to_string_lossy().into(),
        t.backing("data", "d.txt").to_string_lossy().into(),
        t.tmpdir.to_string_lossy().into(),
        "/run".into(),
        "/var".into(),
        "/work".into(),
        "/etc/shadow".into(),
    ]
    .into_iter()
    .filter(|p| p != "/")
    .collect();
    let script: String = probes
        .iter()
        .map(|p| format!("test -e '{p}' && echo 'VISIBLE {p}'; "))
        .collect::<String>()
        + "cat ~/.ssh/id_rsa; echo done";
    let out = t.sh(&["--isolate"], &script);
    assert!(!out.stdout.contains("VISIBLE"), "{}", out.describe());
    assert!(out.stdout.contains("done"), "{}", out.describe());
    assert!(
        out.stderr.contains("No such file"),
        "cat ~/.ssh/id_rsa: {}",
        out.describe()
    );
    t.assert_clean("isolate hides");
}

#[test]
fn isolate_has_no_network_unless_asked() {
    if !bwrap_ok() || !tool_ok("bash") {
        return;
    }
    let t = Task::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED");
    let out = t.run(&["--isolate"], &["bash", "-c", &connect]);
    assert!(!out.stdout.contains("CONNECTED"), "{}", out.describe());
    assert!(!out.success());
    // The same probe works with --network: the test's method is sound.
    let out = t.run(&["--isolate", "--network"], &["bash", "-c", &connect]);
    assert!(out.stdout.contains("CONNECTED"), "{}", out.describe());
    drop(listener);
    t.assert_clean("network");
}

#[test]
fn isolate_environment_is_only_what_was_allowed() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let mut cmd = t.command(
        &["--isolate", "--env", "FOO=bar", "--env", "COPYME"],
        &["env"],
    );
    cmd.env("SECRET_TOKEN", "shh")
        .env("AWS_SECRET_ACCESS_KEY", "shh")
        .env("COPYME", "copied")
        .env("LANG", "C.UTF-8")
        .env("TERM", "dumb");
    let out = run(&mut cmd, Duration::from_secs(60));
    assert!(out.success(), "{}", out.describe());
    let vars: BTreeSet<&str> = out.stdout.lines().collect();
    let want: BTreeSet<&str> = [
        "FOO=bar",
        "COPYME=copied",
        "HOME=/ws",
        "LANG=C.UTF-8",
        "TERM=dumb",
        // Its limits, as it sees them: the zones at /<zone>.
        "ZONEMOUNT_ROOT=/",
        "ZONEMOUNT_WRITABLE=/ws",
        "ZONEMOUNT_READONLY=/data",
        "ZONEMOUNT_REFUSALS=/tmp/zonemount-refusals",
    ]
    .into();
    // PWD is bwrap's (it sets it with --chdir).
    let names: BTreeSet<&str> = vars.iter().filter_map(|l| l.split('=').next()).collect();
    assert_eq!(
        names,
        [
            "PATH",
            "FOO",
            "COPYME",
            "HOME",
            "LANG",
            "TERM",
            "PWD",
            "ZONEMOUNT_ROOT",
            "ZONEMOUNT_WRITABLE",
            "ZONEMOUNT_READONLY",
            "ZONEMOUNT_REFUSALS"
        ]
        .into(),
        "{}",
        out.stdout
    );
    assert!(want.is_subset(&vars), "{}", out.stdout);
    assert!(!out.stdout.contains("shh"));
    t.assert_clean("env");
}

#[test]
fn isolate_exit_status_timeout_and_cleanup() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::new();
    let out = t.sh(&["--isolate"], "exit 5");
    assert_eq!(out.code(), Some(5), "{}", out.describe());
    let out = t.sh(&["--isolate"], "kill -KILL $$");
    assert_eq!(out.code(), Some(128 + 9), "{}", out.describe());
    let start = Instant::now();
    let out = t.sh(&["--isolate", "--timeout", "1"], "sleep 60");
    assert!(!out.success(), "{}", out.describe());
    assert!(start.elapsed() < Duration::from_secs(20));
    t.assert_clean("isolate timeout");
}

#[test]
fn isolate_refuses_a_zone_named_like_a_system_dir() {
    if !bwrap_ok() {
        return;
    }
    let t = Task::with_zones(&[("usr", "mode: rw")]);
    let out = t.run(&["--isolate"], &["true"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(out.stderr.contains("usr"), "{}", out.describe());
    t.assert_clean("reserved zone name");
}

// ---------------------------------------------------------------------------
// --user
// ---------------------------------------------------------------------------

#[test]

fn user_runs_cmd_as_that_uid_and_files_belong_to_it() {
    // --user needs root.
    if !fuse_ok() || !root_ok() {
        return;
    }
    let t = Task::new();
    fs::set_permissions(t.backing("ws", ""), fs::Permissions::from_mode(0o777)).unwrap();
    for opts in [
        &["--user", "65534:65534"][..],
        &["--user", "65534:65534", "--isolate"],
    ] {
        if opts.contains(&"--isolate") && !tool_ok("bwrap") {
            continue;
        }
        let _ = fs::remove_file(t.backing("ws", "made"));
        let out = t.sh(opts, "id -u; id -g; id -G; touch made");
        assert!(out.success(), "{opts:?}: {}", out.describe());
        assert_eq!(out.stdout, "65534\n65534\n65534\n", "{opts:?}");
        let meta = fs::metadata(t.backing("ws", "made")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{opts:?}");
        t.assert_clean("--user");
    }
}

/// `--user`'s CMD starts from the environment `--isolate` gives, not from
/// root's (F5 of an attack pass: root's secrets and HOME reached the
/// other uid): a variable of `run`'s is gone unless passed with `--env`;
/// HOME, USER and LOGNAME are the user's; PATH and zonemount's own
/// variables are there.
#[test]
fn user_gets_a_scrubbed_environment_with_its_own_home() {
    if !fuse_ok() || !root_ok() {
        return;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[2] == "65534")
        .map(|f| (f[0].to_owned(), f[5].to_owned()));
    let t = Task::new();
    let script = "id -u; echo \"secret=${FAKE_SECRET-unset} passed=${PASSED-unset} \
                  set=${SET_HERE-unset} home=$HOME user=${USER-unset} logname=${LOGNAME-unset} \
                  path=${PATH:+set} root=${ZONEMOUNT_ROOT:+set} refusals=${ZONEMOUNT_REFUSALS:+set}\"";
    let out = run(
        t.command(
            &["--user", "65534", "--env", "PASSED", "--env", "SET_HERE=v"],
            &["sh", "-c", script],
        )
        .env("FAKE_SECRET", "s3cr3t-token")
        .env("PASSED", "p")
        .env("HOME", "/root")
        .env("USER", "root")
        .env("LOGNAME", "root"),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.describe());
    let (home, user) = match &entry {
        Some((name, home)) if home.starts_with('/') => (home.clone(), name.clone()),
        Some((name, _)) => ("/".to_owned(), name.clone()),
        None => ("/".to_owned(), "unset".to_owned()),
    };
    assert_eq!(
        out.stdout,
        format!(
            "65534\nsecret=unset passed=p set=v home={home} user={user} logname={user} \
             path=set root=set refusals=set\n"
        ),
        "{}",
        out.describe()
    );
    assert!(!out.stdout.contains("s3cr3t"));
    t.assert_clean("--user env");
}

// ---------------------------------------------------------------------------
// list, unmount --stale, scripts
// ---------------------------------------------------------------------------

/// Three live mounts under one directory (one with a space in its name).
fn three_mounts(parent: &Path) -> Vec<TestMount> {
    ["m1", "m 2", "m3"]
        .iter()
        .map(|name| {
            Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")])
                .mountpoint(parent.join(name).to_str().unwrap(), true)
                .mount()
        })
        .collect()
}

/// A daemon that does not answer (stopped here with SIGSTOP; the guard
/// lets it go on, panic or not) holds up neither `list` nor `approvals
/// list`: each comes back within seconds, naming the mount (before, each
/// waited out the control socket's 30 s read timeout per such mount).
#[test]
fn list_and_approvals_list_do_not_wait_on_a_stopped_daemon() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    ws:\n      path: ./ws\n      mode: rw\n",
    )
    .backing_dir("ws", "ws")
    .file("ws", "f", "x\n")
    .mount();
    let mp = m.mountpoint().to_path_buf();
    let pid = *daemon_pids_for(&mp).first().expect("the mount's daemon");
    struct Cont(u32);
    impl Drop for Cont {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-CONT", &self.0.to_string()])
                .status();
        }
    }
    kill("STOP", pid);
    let _cont = Cont(pid);
    let t = Instant::now();
    let rows = list_json();
    let row = row_for(&rows, &mp).unwrap_or_else(|| panic!("{mp:?} not listed"));
    assert_eq!(row["stale"], false, "{row}");
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "list took {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let out = run(Command::new(BIN).args(["approvals", "list"]), CMD_TIMEOUT);
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "approvals list took {:?}",
        t.elapsed()
    );
    let said = format!(
        "{}: its daemon (pid {pid}) did not answer within",
        mp.display()
    );
    assert!(out.stderr.contains(&said), "{}", out.describe());
}

/// A daemon's main thread can exit while its other threads are still
/// being torn down, and the process keeps its files (a stage dir's lock)
/// until the last one has ended: `unmount`, and so `run`, waits for that,
/// so that a `changes STAGE` right after finds the stage free. Here a
/// process whose main thread exits while another thread, holding a flock,
/// goes on for 1.5 s. (The wait used to end with the main thread; the lock
/// was then still held.)
#[test]
fn waiting_for_a_daemon_waits_for_its_last_thread_and_its_locks() {
    if !require(Need::Tool("python3")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("lock");
    let script = "import ctypes, fcntl, sys, threading, time\n\
                  f = open(sys.argv[1], 'w')\n\
                  fcntl.flock(f, fcntl.LOCK_EX)\n\
                  threading.Thread(target=lambda: time.sleep(1.5)).start()\n\
                  ctypes.CDLL(None).pthread_exit(None)\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(&lock)
        .spawn()
        .unwrap();
    let pid = child.id();
    let main_exited = wait_until(Duration::from_secs(5), || {
        fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    });
    assert!(main_exited, "python's main thread never exited");
    assert!(
        !zonemount::mount::process_alive(pid),
        "a process whose main thread has exited serves nothing: the scans skip it"
    );
    assert!(
        !zonemount::mount::process_ended(pid),
        "a thread is left, holding the lock: not ended"
    );
    assert!(
        zonemount::mount::wait_ended(pid, Duration::from_secs(10)),
        "its last thread did not end within 10 s"
    );
    let f = fs::File::open(&lock).unwrap();
    assert_eq!(
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive),
        Ok(()),
        "the wait ended while the process still held its lock"
    );
    assert!(zonemount::mount::process_ended(pid));
    assert!(child.wait().unwrap().success());
}

/// Starts `zonemount run ...` (argv[3:]) and traces a thread of its
/// daemon that lives until the daemon exits (an unnamed one: its signal
/// thread), so that thread is stopped at its exit, after the main
/// thread's, and held there for argv[1] seconds: a daemon whose last
/// thread ends late. Writes argv[2] once tracing; prints what it saw,
/// including whether `run` returned while the thread was held. Exits with
/// `run`'s status; 3 when it could not set up. Bounded: 60 s in all.
const HOLD_A_DAEMON_THREAD: &str = r#"
import ctypes, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
SEIZE, CONT, DETACH, O_TRACEEXIT, EVENT_EXIT, WALL = 0x4206, 7, 17, 0x40, 6, 0x40000000
hold, marker, cmd = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
end = time.time() + 60
run = subprocess.Popen(cmd)

def fail(why):
    print('hold: ' + why, flush=True)
    if run.poll() is None:
        run.terminate()
    run.wait()
    sys.exit(3)

def comm(pid, tid):
    try:
        return open('/proc/%d/task/%d/comm' % (pid, tid)).read().strip()
    except OSError:
        return ''

daemon, tid = None, None
while tid is None:
    if time.time() > end or run.poll() is not None:
        fail('found no daemon thread to hold')
    for p in filter(str.isdigit, os.listdir('/proc')):
        try:
            ppid = int(open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()[1])
            argv = open('/proc/%s/cmdline' % p, 'rb').read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == run.pid and b'\0mount\0--foreground\0' in argv:
            daemon = int(p)
    if daemon is not None:
        try:
            tasks = sorted(int(t) for t in os.listdir('/proc/%d/task' % daemon))
        except OSError:
            tasks = []
        main = comm(daemon, daemon)
        if any(comm(daemon, t) == 'zm-control' for t in tasks):
            tid = next((t for t in tasks if t != daemon and comm(daemon, t) == main), None)
    time.sleep(0.01)
if libc.ptrace(SEIZE, tid, None, ctypes.c_void_p(O_TRACEEXIT)) != 0:
    fail('cannot trace thread %d: errno %d' % (tid, ctypes.get_errno()))
open(marker, 'w').write('%d %d\n' % (daemon, tid))
while True:
    if time.time() > end:
        libc.ptrace(DETACH, tid, None, None)
        fail('the daemon did not exit')
    got, st = os.waitpid(tid, os.WNOHANG | WALL)
    if got == 0:
        time.sleep(0.005)
        continue
    if os.WIFEXITED(st) or os.WIFSIGNALED(st):
        print('hold: thread %d ended without being held' % tid, flush=True)
        break
    if (st >> 16) == EVENT_EXIT:
        print('hold: thread %d of the daemon held at its exit' % tid, flush=True)
        until = time.time() + hold
        while time.time() < until:
            if run.poll() is not None:
                print('hold: run returned while a thread of its daemon was held', flush=True)
                break
            time.sleep(0.005)
        libc.ptrace(DETACH, tid, None, None)
        break
    sig = os.WSTOPSIG(st) if (st >> 16) == 0 else 0
    libc.ptrace(CONT, tid, None, ctypes.c_void_p(sig))
sys.exit(run.wait())
"#;

/// `run` returns only once its daemon has ended, its last thread included:
/// until then the daemon keeps its files, a stage dir's lock among them.
/// A thread of the real daemon is held at its exit for 1.5 s after the
/// main thread's (with ptrace, by a tracer that starts `run`); `run` must
/// not return meanwhile, and `changes` on the stage right after works.
/// (`run` returned as soon as the daemon's main thread had exited.)
#[test]
fn run_returns_only_once_its_daemons_last_thread_has_ended() {
    if !fuse_ok() || !tool_ok("python3") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir(root.join("b")).unwrap();
    let zone = format!("work={}:staged", root.join("b").display());
    let stage = root.join("stage");
    let traced = root.join("traced");
    let started = Instant::now();
    let out = run(
        Command::new("python3")
            .args(["-c", HOLD_A_DAEMON_THREAD, "1.5"])
            .arg(&traced)
            .arg(BIN)
            .args(["run", "-q", "--zone", &zone, "--stage-dir"])
            .arg(&stage)
            .args([
                "--",
                "sh",
                "-c",
                "echo hi > f; i=0; until [ -e \"$TRACED\" ] || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); done",
            ])
            .env("TRACED", &traced)
            .current_dir(&root),
        Duration::from_secs(90),
    );
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("held at its exit"),
        "no daemon thread was held: {}",
        out.describe()
    );
    assert!(
        !out.stdout.contains("run returned while"),
        "{}",
        out.describe()
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    let out = run(
        Command::new(BIN).arg("changes").arg(&stage),
        Duration::from_secs(30),
    );
    assert!(
        out.success() && out.stdout.contains("/work/f"),
        "{}",
        out.describe()
    );
}

/// A staged `run`, then at once `changes` and `commit` on its stage, ten
/// times: `run` returns only once its daemon has let go of the stage, so
/// both find it free every time (`changes` right after `run` once found it
/// "in use by another mount" over io_uring). Bounded: 120 s in all.
#[test]
fn a_staged_runs_stage_is_free_for_changes_and_commit_the_moment_run_returns() {
    if !fuse_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir(root.join("b")).unwrap();
    let zone = format!("work={}:staged", root.join("b").display());
    let stage = root.join("stage");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rounds = 0;
    while rounds < 10 && Instant::now() < deadline {
        let name = format!("f{rounds}");
        let out = run(
            Command::new(BIN)
                .args(["run", "-q", "--zone", &zone, "--stage-dir"])
                .arg(&stage)
                .args(["--", "sh", "-c", &format!("echo {rounds} > {name}")])
                .current_dir(&root),
            Duration::from_secs(60),
        );
        assert!(out.success(), "round {rounds}: {}", out.describe());
        let out = run(
            Command::new(BIN).arg("changes").arg(&stage),
            Duration::from_secs(30),
        );
        assert!(
            out.success() && out.stdout.contains(&format!("/work/{name}")),
            "round {rounds}: {}",
            out.describe()
        );
        let out = run(
            Command::new(BIN).arg("commit").arg(&stage),
            Duration::from_secs(30),
        );
        assert!(out.success(), "round {rounds}: {}", out.describe());
        assert_eq!(
            fs::read_to_string(root.join("b").join(&name)).unwrap(),
            format!("{rounds}\n")
        );
        rounds += 1;
    }
    assert!(rounds >= 3, "only {rounds} rounds within 120 s");
}

fn list_json() -> Vec<serde_json::Value> {
    let out = run(Command::new(BIN).args(["list", "--json"]), CMD_TIMEOUT);
    assert!(out.success(), "{}", out.describe());
    serde_json::from_str::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn row_for(rows: &[serde_json::Value], mp: &Path) -> Option<serde_json::Value> {
    rows.iter()
        .find(|r| r["mountpoint"].as_str() == Some(&*mp.to_string_lossy()))
        .cloned()
}

#[test]
fn list_shows_live_mounts_and_a_stale_one_after_its_daemon_is_killed() {
    if !fuse_ok() {
        return;
    }
    let parent = tempfile::Builder::new()
        .prefix("zonemount-list-test.")
        .tempdir()
        .unwrap();
    let parent_path = fs::canonicalize(parent.path()).unwrap();
    let mounts = three_mounts(&parent_path);
    let rows = list_json();
    for m in &mounts {
        let row = row_for(&rows, &m.mnt).unwrap_or_else(|| panic!("{:?} not listed", m.mnt));
        assert_eq!(row["stale"], false, "{row}");
        assert_eq!(row["mounted"], true, "{row}");
        assert!(row["pid"].as_u64().is_some(), "{row}");
        assert_eq!(row["zones"], serde_json::json!(["ws"]), "{row}");
        assert!(row["config"].as_str().unwrap().ends_with("project.yaml"));
    }
    let table = run(Command::new(BIN).arg("list"), CMD_TIMEOUT);
    assert!(table.stdout.contains(&*mounts[1].mnt.to_string_lossy()));

    // Kill one daemon outright, its watcher first (else the watcher cleans
    // up at once, see tests/lifecycle.rs): its mount is stale.
    let victim = &mounts[0].mnt;
    let pid = row_for(&rows, victim).unwrap()["pid"].as_u64().unwrap() as u32;
    let sock = zonemount::mount::find_record(victim)
        .and_then(|r| r.control)
        .expect("the victim's control socket");
    for w in watcher_pids_for(victim) {
        kill("KILL", w);
    }
    assert!(wait_until(Duration::from_secs(10), || watcher_pids_for(
        victim
    )
    .is_empty()));
    kill("KILL", pid);
    assert!(
        wait_until(Duration::from_secs(10), || row_for(&list_json(), victim)
            .is_some_and(|r| r["stale"] == true)),
        "{victim:?} never listed as stale"
    );
    let table = run(Command::new(BIN).arg("list"), CMD_TIMEOUT);
    assert!(table.stdout.contains("stale"), "{}", table.stdout);

    let out = run(Command::new(BIN).args(["unmount", "--stale"]), CMD_TIMEOUT);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains(&*victim.to_string_lossy()),
        "{}",
        out.describe()
    );
    let rows = list_json();
    assert!(
        row_for(&rows, victim).is_none(),
        "still listed after --stale"
    );
    assert!(!is_mounted(victim));
    assert!(!sock.exists(), "--stale left the socket {}", sock.display());
    for m in &mounts[1..] {
        assert!(m.is_mounted(), "--stale touched a live mount");
        assert_eq!(row_for(&rows, &m.mnt).unwrap()["stale"], false);
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

#[test]
fn teardown_script_unmounts_three_live_mounts_and_is_safe_twice() {
    if !fuse_ok() {
        return;
    }
    let parent = tempfile::Builder::new()
        .prefix("zonemount-teardown-test.")
        .tempdir()
        .unwrap();
    let parent_path = fs::canonicalize(parent.path()).unwrap();
    let mounts = three_mounts(&parent_path);
    // A mount of another type under the same dir is left alone (root only).
    let other = parent_path.join("other");
    fs::create_dir(&other).unwrap();
    let tmpfs = root_ok();
    if tmpfs {
        let out = run(
            Command::new("mount")
                .args(["-t", "tmpfs", "none"])
                .arg(&other),
            CMD_TIMEOUT,
        );
        assert!(out.success(), "mount tmpfs: {}", out.describe());
    }

    let teardown = || {
        run(
            Command::new("bash")
                .arg(script("teardown.sh"))
                .arg(&parent_path)
                .env("ZONEMOUNT", BIN),
            CMD_TIMEOUT,
        )
    };
    let out = teardown();
    assert!(out.success(), "{}", out.describe());
    for m in &mounts {
        assert!(!m.is_mounted(), "{:?} still mounted", m.mnt);
        assert!(
            out.stdout
                .contains(&format!("unmounted {}", m.mnt.display())),
            "{}",
            out.describe()
        );
        assert!(
            daemon_pids_for(&m.mnt).is_empty(),
            "daemon of {:?} lives",
            m.mnt
        );
    }
    assert!(out.stdout.contains("daemon"), "{}", out.describe());
    assert!(
        out.stdout.contains("3 unmounted, 0 failed"),
        "{}",
        out.describe()
    );
    if tmpfs {
        assert!(is_mounted(&other), "teardown touched a tmpfs");
        let _ = Command::new("umount").arg(&other).status();
    }

    let again = teardown();
    assert!(again.success(), "{}", again.describe());
    assert!(
        again.stdout.contains("no zonemount mounts"),
        "{}",
        again.describe()
    );
}

#[test]
fn per_task_example_script_runs_clean() {
    if !fuse_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        Command::new("bash")
            .arg(script("per-task-example.sh"))
            .env("ZONEMOUNT", BIN)
            .env("TMPDIR", tmp.path()),
        CMD_TIMEOUT,
    );
    assert!(out.success(), "{}", out.describe());
    assert!(out.stdout.contains("result: 3 words"), "{}", out.describe());
    assert!(
        out.stdout.contains("result (run): 1 line"),
        "{}",
        out.describe()
    );
    assert!(
        names(tmp.path()).unwrap().is_empty(),
        "left behind in TMPDIR"
    );
}

/// The refusal log: CMD meets a refusal, then reads why in
/// $ZONEMOUNT_REFUSALS, in words about paths and permissions; it can't
/// write the log under --isolate (or --user); the log goes with the task.
#[test]
fn cmd_reads_why_it_was_refused() {
    if !fuse_ok() {
        return;
    }
    let t = Task::with_zones(&[
        ("data", "mode: ro"),
        (
            "ws",
            "mode: rw, approval: { delete: blocked }, protect: [keep]",
        ),
    ]);
    fs::write(t.backing("ws", "f"), "f\n").unwrap();
    let script = "echo x > \"$ZONEMOUNT_ROOT/data/new\"; rm \"$ZONEMOUNT_ROOT/ws/f\"; \
                  mkdir \"$ZONEMOUNT_ROOT/ws/keep\"; echo \"log=$ZONEMOUNT_REFUSALS\"; cat \"$ZONEMOUNT_REFUSALS\"";
    let out = t.sh(&[], script);
    assert!(out.success(), "{}", out.describe());
    let log = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("log="))
        .unwrap()
        .to_string();
    let root = log.strip_suffix(".refusals").unwrap().to_string();
    for want in [
        format!(
            "create {root}/data/new: EROFS (Read-only file system): this path is read-only. Writable paths: {root}/ws."
        ),
        format!(
            "delete {root}/ws/f: EPERM (Operation not permitted): deleting is not permitted here."
        ),
        format!(
            "create {root}/ws/keep: EROFS (Read-only file system): this path is protected (read-only)."
        ),
    ] {
        assert!(
            out.stdout.contains(&want),
            "{want:?} not in:\n{}",
            out.stdout
        );
    }
    let words: Vec<String> = out
        .stdout
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_lowercase)
        .collect();
    assert!(
        !words.iter().any(|w| w == "zone" || w == "zones"),
        "zone terminology: {}",
        out.stdout
    );
    assert!(
        !Path::new(&log).exists(),
        "the log is removed with the task"
    );
    t.assert_clean("after a run with refusals");
    if !bwrap_ok() {
        return;
    }
    // Under --isolate: at a fixed path, read-only, paths as the sandbox
    // sees them (a ro zone is bound read-only: the kernel refuses there
    // before the mount is asked, so only the rw zone's refusals show).
    let out = t.sh(
        &["--isolate"],
        "rm /ws/f; mkdir /ws/keep; echo hack >> \"$ZONEMOUNT_REFUSALS\" && echo WROTE; \
         echo \"log=$ZONEMOUNT_REFUSALS\"; cat \"$ZONEMOUNT_REFUSALS\"",
    );
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("log=/tmp/zonemount-refusals"),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("WROTE"),
        "CMD wrote its refusal log: {}",
        out.stdout
    );
    assert!(out.stdout.contains("delete /ws/f: EPERM"), "{}", out.stdout);
    assert!(
        out.stdout.contains("create /ws/keep: EROFS"),
        "{}",
        out.stdout
    );
    t.assert_clean("after an isolated run");
}

/// What `run` starts CMD through on the host (its keeper, here without a
/// mount): as an ordinary user, a user namespace that maps only that
/// user's uid and gid, and a PID namespace in it where CMD is pid 2 under
/// an init; CMD's exit status comes back. As root the test runs it as
/// nobody (65534).
#[test]
fn an_ordinary_users_cmd_gets_its_own_pid_namespace_mapping_only_its_ids() {
    let mut cmd = if is_root() {
        if !tool_ok("setpriv") {
            return;
        }
        let mut c = Command::new("setpriv");
        c.args(setpriv_as((65534, 65534))).arg(BIN);
        c
    } else {
        Command::new(BIN)
    };
    cmd.args([
        "__worker",
        "--note",
        "--",
        "sh",
        "-c",
        "echo \"pid=$$\"; readlink /proc/self/ns/pid; \
         echo \"uid=$(id -u) gid=$(id -g)\"; cat /proc/self/uid_map /proc/self/gid_map; exit 7",
    ])
    .current_dir("/");
    let out = run(&mut cmd, Duration::from_secs(30));
    assert_eq!(out.code(), Some(7), "{}", out.describe());
    let ids = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("uid="))
        .map(|l| l.replace(" gid=", " "))
        .expect("ids");
    let (uid, gid) = ids.split_once(' ').unwrap();
    if out.stderr.contains("no PID namespace could be made") {
        // This host gives an ordinary user no user namespace: the
        // fallback, said in one line, and CMD still runs.
        assert!(!under_ci(), "{}", out.describe());
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.describe());
        return;
    }
    assert!(out.stdout.contains("pid=2\n"), "{}", out.describe());
    let ours = fs::read_link("/proc/self/ns/pid").unwrap();
    assert!(
        !out.stdout.contains(&*ours.to_string_lossy()),
        "{}",
        out.describe()
    );
    let maps: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        maps,
        vec![vec![uid, uid, "1"], vec![gid, gid, "1"]],
        "only the user's own ids, to themselves: {}",
        out.describe()
    );
}
