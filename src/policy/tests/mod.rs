//! Unit tests of the pure policy: every row of DESIGN §3, by topic (what
//! is hidden, what each class needs, what a zone's shape refuses, and
//! moves), over the fixtures below.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::*;
use crate::config::{Access, Approval, ApprovalPolicy, Zone, ZonePolicy};

mod approvals;
mod hidden;
mod limits;
mod moves;

fn zone(access: Access, write: Approval, delete: Approval) -> ZoneRules {
    zone_with(access, write, delete, None, None, &[])
}

fn zone_with(
    access: Access,
    write: Approval,
    delete: Approval,
    suffixes: Option<&[&str]>,
    max: Option<u64>,
    protect: &[&str],
) -> ZoneRules {
    ZoneRules::compile(&Zone {
        name: "z".into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy {
                write,
                delete,
                read: Approval::PreApproved,
            },
            suffixes: suffixes.map(|s| s.iter().map(|x| x.to_string()).collect()),
            max_file_bytes: max,
            protect: protect.iter().map(|x| x.to_string()).collect(),
            hidden: vec![],
            hide: vec![],
            ask_read: vec![],
            staged: false,
        },
    })
    .unwrap()
}

use Approval::{Ask, Blocked, PreApproved};

fn with_hidden(access: Access, hidden: &[&str]) -> ZoneRules {
    ZoneRules::compile(&Zone {
        name: "home".into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy::default(),
            suffixes: Some(vec![".md".into()]),
            max_file_bytes: Some(1),
            protect: vec![".git".into()],
            hidden: hidden.iter().map(PathBuf::from).collect(),
            hide: vec![],
            ask_read: vec![],
            staged: false,
        },
    })
    .unwrap()
}

fn rw() -> ZoneRules {
    zone(Access::Rw, PreApproved, PreApproved)
}
fn ro() -> ZoneRules {
    zone(Access::Ro, PreApproved, PreApproved)
}
fn at<'a>(z: &'a ZoneRules, p: &'a str) -> Loc<'a> {
    Loc::in_zone(z, Path::new(p))
}
/// What a lookup of `p` meets (None: visible).
fn look(z: &ZoneRules, p: &str, is_dir: Option<bool>) -> Option<Refusal> {
    match decide(&Op::Look {
        at: at(z, p),
        is_dir,
    }) {
        Decision::Refuse(r) => Some(r),
        Decision::Allow => None,
        d => panic!("a lookup is never asked about: {d:?}"),
    }
}

/// A metadata change (chmod, utimes, xattrs) of the file at `at`.
pub(super) fn meta(at: Loc<'_>) -> Op<'_> {
    Op::Metadata { at, is_dir: false }
}

/// An unlink of the file at `at`.
pub(super) fn remove(at: Loc<'_>) -> Op<'_> {
    Op::Remove { at, is_dir: false }
}

fn refused(op: Op<'_>) -> Refusal {
    match decide(&op) {
        Decision::Refuse(r) => r,
        d => panic!("expected a refusal, got {d:?}"),
    }
}
