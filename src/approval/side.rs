//! Who is on the worker's side, and so may not decide for it (approve its
//! requests, commit or discard what it staged).
//!
//! Two rules, both applied:
//! - **the PID-namespace rule**: a decider inside the worker's PID
//!   namespace, or in any namespace nested inside it, is refused. `run`
//!   starts CMD in a namespace of its own; `setsid`, double forks,
//!   `nohup` and daemons stay inside it. The worker's namespaces are the
//!   one `run` registered ([`WorkerSide::register`]) and the asking (or
//!   stage-changing) process's own, whenever it is not the daemon's.
//! - **the session rule** ([`caller::kin`]): a decider in the session of
//!   the asking process, or descended from it. What holds where no
//!   namespace could be made; `setsid` and a double fork leave it.
//!
//! The decision is pure ([`inside`]); the facts come from `/proc` and the
//! `NS_GET_PARENT` ioctl (`isolate::pidns`).

use std::io;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::caller;
pub use crate::isolate::pidns::NsId;
use crate::isolate::pidns::PidNs;

/// How deep PID namespaces nest (the kernel's limit is 32).
const MAX_DEPTH: usize = 33;

/// The fix named in a refusal by the namespace rule.
const FIX_NS: &str = "run it from another terminal (a different session), or from the shell that started `zonemount run` (it is outside the worker's namespace); `setsid zonemount ...` does not help from inside a `run`";
/// The fix named in a refusal by the session rule.
const FIX_SESSION: &str = "run it from another terminal (a different session), or start the worker with `zonemount run` (e.g. `zonemount run ... -- CMD &`): the shell that started it is outside it and may decide";

/// Who the worker's processes are, as a refusal names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worker {
    /// The process that made a request.
    Asked,
    /// A process that wrote to the stage.
    Staged,
}

impl Worker {
    fn words(self) -> &'static str {
        match self {
            Worker::Asked => "the process that made the request",
            Worker::Staged => "a process that wrote to the stage",
        }
    }
}

/// The PID namespace of process `pid`; None when it can't be read (gone,
/// or not ours to look at).
pub fn pid_ns(pid: u32) -> Option<NsId> {
    PidNs::of(Some(pid)).and_then(|ns| ns.id()).ok()
}

/// Process `pid`'s PID namespace and every one enclosing it that this
/// process can see, innermost first (the last is ours, when `pid` is
/// below it).
pub fn enclosing(pid: u32) -> io::Result<Vec<NsId>> {
    let mut ns = PidNs::of(Some(pid))?;
    let mut chain = Vec::new();
    for _ in 0..MAX_DEPTH {
        chain.push(ns.id()?);
        match ns.parent()? {
            Some(p) => ns = p,
            None => break,
        }
    }
    Ok(chain)
}

/// The first of the worker's namespaces (`worker`, the daemon's own
/// `own` excepted: everyone is inside that one) that encloses a decider
/// whose namespaces are `chain` (innermost first).
pub fn inside(chain: &[NsId], worker: &[NsId], own: Option<NsId>) -> Option<NsId> {
    chain
        .iter()
        .find(|ns| Some(**ns) != own && worker.contains(ns))
        .copied()
}

/// The boundary between the worker and its deciders, as `run` told it
/// (`status` shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Boundary {
    /// CMD runs in a PID namespace of its own (`ns`: its inode, as
    /// `readlink /proc/PID/ns/pid` shows it).
    PidNamespace { ns: u64 },
    /// No namespace could be made (`why`): only the session rule holds.
    Session { why: String },
    /// CMD runs under `--isolate`: the control socket is not in its world.
    Isolate,
}

impl Boundary {
    /// One line for people: who may not decide, and how firm that is.
    pub fn line(&self) -> String {
        match self {
            Boundary::PidNamespace { ns } => format!(
                "not from inside the worker's PID namespace (pid:[{ns}]), whatever it forks"
            ),
            Boundary::Session { why } => format!(
                "not from the worker's session or its descendants, which `setsid` or a double fork leaves ({}); --user or --isolate hold",
                crate::text::escape(why.as_bytes())
            ),
            Boundary::Isolate => {
                "the worker can't reach the control socket (--isolate)".to_string()
            }
        }
    }
}

/// What `run` tells the daemon about its worker (the control op
/// `worker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The sender is the init of the worker's PID namespace.
    OwnPidNamespace,
    /// No namespace could be made, for `why`.
    Session { why: String },
    /// CMD runs under `--isolate`.
    Isolate,
}

/// What the daemon knows of its worker's side.
#[derive(Debug)]
pub struct WorkerSide {
    /// The daemon's own PID namespace.
    own: Option<NsId>,
    /// The daemon's uid: a decider of another uid (root) is not the worker.
    own_uid: u32,
    registered: Mutex<Option<(Boundary, Option<NsId>)>>,
    /// The mount is a `zonemount run` task's: its init may register the
    /// worker's boundary. On any other mount there is no worker `run`
    /// started, and a claim (from anyone of the mount's user) would only
    /// make `status` say what does not hold.
    claims: std::sync::atomic::AtomicBool,
}

impl Default for WorkerSide {
    fn default() -> Self {
        WorkerSide::new()
    }
}

impl WorkerSide {
    pub fn new() -> WorkerSide {
        WorkerSide {
            own: PidNs::of(None).and_then(|ns| ns.id()).ok(),
            own_uid: rustix::process::geteuid().as_raw(),
            registered: Mutex::new(None),
            claims: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Take the one claim of a `zonemount run` task's init (the mount was
    /// made by `run`).
    pub fn accept_claims(&self) {
        self.claims
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// What `run` registered, if anything.
    pub fn boundary(&self) -> Option<Boundary> {
        self.registered.lock().as_ref().map(|(b, _)| b.clone())
    }

    /// Record the worker's boundary, once, as `peer` claims it: its own
    /// PID namespace (what `run`'s init in the worker's namespace sends
    /// before CMD starts, so no process of the worker's can have claimed
    /// first), or no namespace. A second claim is refused.
    pub fn register(&self, peer: Option<u32>, claim: Claim) -> Result<Boundary, String> {
        if !self.claims.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(
                "this mount was not made by `zonemount run`: there is no worker's boundary to register"
                    .into(),
            );
        }
        let mut reg = self.registered.lock();
        if reg.is_some() {
            return Err("the worker's boundary is already registered".into());
        }
        let (boundary, ns) = match claim {
            Claim::OwnPidNamespace => {
                let pid = peer.ok_or("a peer in a PID namespace this daemon can't see")?;
                let ns = PidNs::of(Some(pid))
                    .and_then(|ns| ns.id())
                    .map_err(|e| format!("process {pid}'s PID namespace: {e}"))?;
                if Some(ns) == self.own {
                    return Err(format!(
                        "process {pid} is in the daemon's own PID namespace"
                    ));
                }
                (Boundary::PidNamespace { ns: ns.ino }, Some(ns))
            }
            Claim::Session { why } => (Boundary::Session { why }, None),
            Claim::Isolate => (Boundary::Isolate, None),
        };
        *reg = Some((boundary.clone(), ns));
        Ok(boundary)
    }

    /// Why the process `decider` (of uid `decider_uid`; None: a peer in
    /// a namespace we can't see, so not below ours) may not decide for
    /// the worker, in plain words and with the fix: `askers` are
    /// processes of the worker (`who` says what they did), with the
    /// session each was in when it acted (it may be gone now), `recorded`
    /// namespaces a worker was seen in (an asker's, a stage's writers').
    /// None when it may.
    pub fn refusal(
        &self,
        decider: Option<u32>,
        decider_uid: u32,
        askers: &[AskedFrom],
        recorded: &[NsId],
        who: Worker,
    ) -> Option<String> {
        let decider = decider?;
        let mut worker: Vec<NsId> = recorded.to_vec();
        worker.extend(self.registered.lock().as_ref().and_then(|(_, ns)| *ns));
        worker.extend(askers.iter().filter_map(|a| pid_ns(a.pid)));
        worker.retain(|ns| Some(*ns) != self.own);
        if !worker.is_empty() {
            match enclosing(decider) {
                Ok(chain) => {
                    if let Some(ns) = inside(&chain, &worker, self.own) {
                        return Some(format!(
                            "this command (pid {decider}) runs inside the worker's PID namespace (pid:[{}]): the worker started it, or it was typed inside the worker's `zonemount run`, and nothing in there may decide for the worker, whatever it forks; {FIX_NS}",
                            ns.ino
                        ));
                    }
                }
                // Root (for a user's daemon) is never the worker; a
                // process of our own uid we can't look at (gone already)
                // might be.
                Err(e) if decider_uid == self.own_uid => {
                    return Some(format!(
                        "this command (pid {decider}) can't be told apart from the worker ({e}); {FIX_NS}"
                    ));
                }
                Err(_) => {}
            }
        }
        let decider_session = caller::session_of(decider);
        askers.iter().find_map(|a| {
            let (how, whose) = match caller::kin(a.pid, decider) {
                Some(caller::Kin::Session) => ("runs in the same terminal session as", caller::comm(a.pid)),
                Some(caller::Kin::Descendant) => ("was started by", caller::comm(a.pid)),
                // Gone (or moved to a session of its own since): the
                // session it acted from still counts.
                None if a.session.is_some() && a.session == decider_session => (
                    "runs in the terminal session of",
                    "exited since".to_string(),
                ),
                None => return None,
            };
            Some(format!(
                "this command (pid {decider}) {how} {} (pid {}, {whose}), and a worker may not decide for itself; {FIX_SESSION}",
                who.words(),
                a.pid,
            ))
        })
    }
}

/// A process of the worker's, and the session it was in when it acted
/// (None: not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskedFrom {
    pub pid: u32,
    pub session: Option<u32>,
}

impl AskedFrom {
    /// Process `pid`, alive now: its session read now.
    pub fn now(pid: u32) -> AskedFrom {
        AskedFrom {
            pid,
            session: caller::session_of(pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(ino: u64) -> NsId {
        NsId { dev: 4, ino }
    }

    #[test]
    fn a_decider_inside_the_workers_namespace_or_below_it_is_refused() {
        let (own, w, nested, other) = (ns(1), ns(2), ns(3), ns(4));
        // In the worker's namespace itself.
        assert_eq!(inside(&[w, own], &[w], Some(own)), Some(w));
        // In a namespace the worker made inside its own.
        assert_eq!(inside(&[nested, w, own], &[w], Some(own)), Some(w));
        // In a sibling namespace, or in ours.
        assert_eq!(inside(&[other, own], &[w], Some(own)), None);
        assert_eq!(inside(&[own], &[w], Some(own)), None);
        // The daemon's own namespace is never the worker's: everyone is in it.
        assert_eq!(inside(&[own], &[own], Some(own)), None);
    }

    /// Most asks outlive their callers (a mkdir told EAGAIN, a create
    /// answered at once): the session the asker was in still counts once
    /// it has exited (found by an attack pass: `mkdir` then `zonemount
    /// approvals allow` from the same shell was let through).
    #[test]
    fn an_asker_that_exited_still_keeps_its_session_from_deciding() {
        let side = WorkerSide::new();
        let me = std::process::id();
        let mine = caller::session_of(me);
        assert!(mine.is_some());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let asked = AskedFrom {
            pid: gone,
            session: mine,
        };
        let why = side
            .refusal(Some(me), side.own_uid, &[asked], &[], Worker::Asked)
            .unwrap();
        assert!(
            why.contains(&format!(
                "runs in the terminal session of the process that made the request (pid {gone}, exited since)"
            )),
            "{why}"
        );
        let elsewhere = AskedFrom {
            pid: gone,
            session: mine.map(|s| s.wrapping_add(1)),
        };
        assert_eq!(
            side.refusal(Some(me), side.own_uid, &[elsewhere], &[], Worker::Asked),
            None
        );
        let unknown = AskedFrom {
            pid: gone,
            session: None,
        };
        assert_eq!(
            side.refusal(Some(me), side.own_uid, &[unknown], &[], Worker::Asked),
            None
        );
    }

    #[test]
    fn without_a_namespace_the_session_rule_still_refuses_and_names_the_fix() {
        let side = WorkerSide::new();
        let me = std::process::id();
        let why = side
            .refusal(
                Some(me),
                side.own_uid,
                &[AskedFrom::now(me)],
                &[],
                Worker::Asked,
            )
            .unwrap();
        assert!(
            why.contains("runs in the same terminal session as the process that made the request"),
            "{why}"
        );
        assert!(
            why.contains("from another terminal (a different session), or start the worker with `zonemount run`"),
            "{why}"
        );
        let why = side
            .refusal(
                Some(me),
                side.own_uid,
                &[AskedFrom::now(me)],
                &[],
                Worker::Staged,
            )
            .unwrap();
        assert!(
            why.contains("as a process that wrote to the stage"),
            "{why}"
        );
        // Nothing asked by anyone alive: nothing to refuse.
        assert_eq!(
            side.refusal(Some(me), side.own_uid, &[], &[], Worker::Asked),
            None
        );
        assert_eq!(
            side.refusal(None, 0, &[AskedFrom::now(me)], &[], Worker::Asked),
            None
        );
    }

    #[test]
    fn a_recorded_namespace_refuses_a_decider_inside_it() {
        let side = WorkerSide::new();
        let me = std::process::id();
        let own = side.own.expect("own ns");
        // This process's own namespace is the daemon's: never the worker's.
        assert_eq!(
            side.refusal(Some(me), side.own_uid, &[], &[own], Worker::Asked),
            None
        );
        // A gone decider of our uid can't be told apart when a worker
        // namespace is in play; root's can.
        let w = ns(u64::MAX);
        let gone = u32::MAX - 1;
        let why = side
            .refusal(Some(gone), side.own_uid, &[], &[w], Worker::Asked)
            .unwrap();
        assert!(
            why.contains("can't be told apart")
                && why.contains("or from the shell that started `zonemount run`")
                && why.contains("`setsid zonemount ...` does not help from inside a `run`"),
            "{why}"
        );
        assert_eq!(
            side.refusal(Some(gone), side.own_uid ^ 1, &[], &[w], Worker::Asked),
            None
        );
    }

    #[test]
    fn registration_is_once_and_not_of_our_own_namespace() {
        let side = WorkerSide::new();
        let me = std::process::id();
        // Not a `run` task's mount: nobody registers anything.
        let refused = side.register(None, Claim::Isolate).unwrap_err();
        assert!(refused.contains("not made by `zonemount run`"), "{refused}");
        assert_eq!(side.boundary(), None);
        side.accept_claims();
        assert!(side.register(Some(me), Claim::OwnPidNamespace).is_err());
        assert!(side.register(None, Claim::OwnPidNamespace).is_err());
        assert_eq!(side.boundary(), None);
        let why = "EPERM".to_string();
        assert_eq!(
            side.register(None, Claim::Session { why: why.clone() }),
            Ok(Boundary::Session { why })
        );
        assert!(side.register(None, Claim::Isolate).is_err(), "once");
    }

    /// A claim's words are the claimant's: shown escaped (found by an
    /// attack pass: ESC sequences and a forged second line in `status`).
    #[test]
    fn a_session_claims_words_are_shown_escaped() {
        let b = Boundary::Session {
            why: "fine\u{1b}[2J\nwho decides: only root".into(),
        };
        let line = b.line();
        assert!(!line.contains('\u{1b}') && !line.contains('\n'), "{line:?}");
        assert!(line.contains("fine\\x1b[2J\\nwho decides"), "{line:?}");
    }
}
