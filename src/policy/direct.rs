//! Which zones need the daemon at all: where zonemount builds the
//! worker's world (`run --isolate`), a zone whose every rule the kernel
//! enforces by itself is bound straight from its backing dir (DESIGN §7).
//!
//! Pure: a zone's effective policy in, the route and its reasons out.

use crate::config::{Access, Approval, Zone, ZonePolicy};

/// How a zone reaches the worker under `run --isolate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Bound straight from the backing dir: the kernel enforces every
    /// rule the zone has (a ro bind refuses writes with EROFS).
    Direct,
    /// Through the daemon, for these rules (each in a few words).
    Daemon(Vec<String>),
}

/// The rules of `p` that only the daemon can enforce (empty: none). A ro
/// zone needs it for `hide`, read approval (`approval.read`, `ask_read`),
/// sensitive roots inside it, a suffix filter and a size limit (EFBIG on
/// read); a rw zone also for write or delete that is not preApproved,
/// `protect`, staging, and the change report it would lose.
pub fn needs_daemon(p: &ZonePolicy) -> Vec<String> {
    let mut why = Vec::new();
    let mut say = |cond: bool, what: &str| {
        if cond {
            why.push(what.to_owned());
        }
    };
    say(!p.hide.is_empty(), "hide patterns");
    say(!p.hidden.is_empty(), "sensitive roots inside it");
    say(p.approval.read != Approval::PreApproved, "read approval");
    say(!p.ask_read.is_empty(), "ask_read patterns");
    say(p.suffixes.is_some(), "a suffix filter");
    say(p.max_file_bytes.is_some(), "max_file_bytes");
    if p.access == Access::Rw {
        say(p.approval.write != Approval::PreApproved, "write approval");
        say(
            p.approval.delete != Approval::PreApproved,
            "delete approval",
        );
        say(!p.protect.is_empty(), "protect patterns");
        say(p.staged, "staged");
    }
    why
}

/// The route `p` takes when nothing keeps it on the daemon.
pub fn route(p: &ZonePolicy) -> Route {
    let why = needs_daemon(p);
    if why.is_empty() {
        Route::Direct
    } else {
        Route::Daemon(why)
    }
}

/// Whether a mount of `zones` may let the kernel open files itself
/// (FUSE's no-open mode: no OPEN or RELEASE round trips), mounted
/// read-only: every zone is read-only and needs the daemon for no rule
/// (`needs_daemon`), so no open of a file could be refused or asked about
/// by the daemon that the kernel's own checks (a read-only mount, mode
/// bits under `default_permissions`) would let through. `Err`: why not,
/// in a few words. Who may use the mount (`--allow-uid`) is the mount's
/// business, not the zones' (`mount::session`).
pub fn kernel_opens(zones: &[Zone]) -> Result<(), String> {
    if zones.is_empty() {
        return Err("no zones".to_owned());
    }
    for z in zones {
        if z.policy.access == Access::Rw {
            return Err(format!("zone {} is read-write", z.name));
        }
        if z.policy.staged {
            return Err(format!("zone {} is staged", z.name));
        }
        let why = needs_daemon(&z.policy);
        if !why.is_empty() {
            return Err(format!("zone {} has {}", z.name, why.join(", ")));
        }
    }
    Ok(())
}

/// What a zone bound straight from its backing dir gives up, in words.
pub fn direct_note(access: Access) -> &'static str {
    match access {
        Access::Ro => "read-only: the kernel refuses writes with EROFS",
        Access::Rw => "no rule needs the daemon; no change report for it",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ApprovalPolicy;

    fn with(access: Access, f: impl FnOnce(&mut ZonePolicy)) -> Route {
        let mut p = ZonePolicy::plain(access);
        f(&mut p);
        route(&p)
    }

    fn daemon(r: Route) -> Vec<String> {
        match r {
            Route::Daemon(w) => w,
            Route::Direct => panic!("expected the daemon"),
        }
    }

    #[test]
    fn plain_zones_are_direct() {
        assert_eq!(with(Access::Ro, |_| {}), Route::Direct);
        assert_eq!(with(Access::Rw, |_| {}), Route::Direct);
        // protect means nothing more in a ro zone: everything is EROFS.
        assert_eq!(
            with(Access::Ro, |p| p.protect = vec!["*.lock".into()]),
            Route::Direct
        );
    }

    #[test]
    fn every_rule_the_kernel_cannot_enforce_keeps_the_daemon() {
        type Set = fn(&mut ZonePolicy);
        let ro: &[(Set, &str)] = &[
            (|p| p.hide = vec!["secrets/".into()], "hide patterns"),
            (
                |p| p.hidden = vec![".ssh".into()],
                "sensitive roots inside it",
            ),
            (|p| p.approval.read = Approval::Ask, "read approval"),
            (|p| p.approval.read = Approval::Blocked, "read approval"),
            (|p| p.ask_read = vec!["*.env".into()], "ask_read patterns"),
            (|p| p.suffixes = Some(vec![".md".into()]), "a suffix filter"),
            (|p| p.max_file_bytes = Some(10), "max_file_bytes"),
        ];
        for access in [Access::Ro, Access::Rw] {
            for (set, why) in ro {
                assert_eq!(
                    daemon(with(access, set)),
                    vec![why.to_string()],
                    "{access:?}"
                );
            }
        }
        let rw: &[(Set, &str)] = &[
            (|p| p.approval.write = Approval::Ask, "write approval"),
            (|p| p.approval.write = Approval::Blocked, "write approval"),
            (|p| p.approval.delete = Approval::Ask, "delete approval"),
            (|p| p.approval.delete = Approval::Blocked, "delete approval"),
            (|p| p.protect = vec!["*.lock".into()], "protect patterns"),
            (|p| p.staged = true, "staged"),
        ];
        for (set, why) in rw {
            assert_eq!(daemon(with(Access::Rw, set)), vec![why.to_string()]);
        }
        // Write and delete policies mean nothing in a ro zone.
        assert_eq!(
            with(Access::Ro, |p| p.approval = ApprovalPolicy {
                write: Approval::Blocked,
                delete: Approval::Ask,
                read: Approval::PreApproved
            }),
            Route::Direct
        );
    }

    fn zone(name: &str, access: Access, f: impl FnOnce(&mut ZonePolicy)) -> Zone {
        let mut policy = ZonePolicy::plain(access);
        f(&mut policy);
        Zone {
            name: name.into(),
            backing: format!("/srv/{name}").into(),
            policy,
        }
    }

    #[test]
    fn the_kernel_opens_only_where_every_zone_is_plain_read_only() {
        let src = zone("src", Access::Ro, |_| {});
        let docs = zone("docs", Access::Ro, |p| p.protect = vec!["*.lock".into()]);
        assert_eq!(kernel_opens(&[src.clone(), docs.clone()]), Ok(()));
        assert_eq!(kernel_opens(&[]), Err("no zones".to_owned()));
        let out = zone("out", Access::Rw, |_| {});
        assert_eq!(
            kernel_opens(&[src.clone(), out]),
            Err("zone out is read-write".to_owned())
        );
        let secret = zone("cfg", Access::Ro, |p| {
            p.hide = vec!["*.key".into()];
            p.max_file_bytes = Some(1);
        });
        assert_eq!(
            kernel_opens(&[src.clone(), secret]),
            Err("zone cfg has hide patterns, max_file_bytes".to_owned())
        );
        let asks = zone("env", Access::Ro, |p| p.ask_read = vec![".env".into()]);
        assert_eq!(
            kernel_opens(&[asks, src]),
            Err("zone env has ask_read patterns".to_owned())
        );
        let staged = zone("st", Access::Ro, |p| p.staged = true);
        assert_eq!(kernel_opens(&[staged]), Err("zone st is staged".to_owned()));
    }

    #[test]
    fn every_reason_is_listed() {
        let why = daemon(with(Access::Rw, |p| {
            p.hide = vec!["a".into()];
            p.staged = true;
        }));
        assert_eq!(why, vec!["hide patterns", "staged"]);
    }
}
