//! Ledger records and display fields of requests: pure functions of a
//! request and its outcome.

use super::{AskRequest, RequestInfo, Resolution, class_name, virtual_path};
use std::path::PathBuf;

use crate::audit::{self, Kind};

pub(super) fn request_record(info: &RequestInfo) -> audit::Record {
    audit::Record {
        id: Some(info.id),
        zone: Some(info.zone.clone()),
        class: Some(info.class.clone()),
        op: Some(info.op.clone()),
        path: Some(info.path.clone()),
        path_b64: info.path_b64.clone(),
        target: info.target.clone(),
        target_b64: info.target_b64.clone(),
        pid: Some(info.pid),
        uid: Some(info.uid),
        cmdline: Some(info.cmdline.clone()),
        cmdline_b64: info.cmdline_b64.clone(),
        ..audit::Record::default()
    }
}

/// The fields of a ledger record about `req` when no request is made for
/// it (refused at once, or allowed without asking).
pub(super) fn ask_record(req: &AskRequest, caller: &super::caller::Caller) -> audit::Record {
    let (zone, class, path, target) = describe(req);
    audit::Record {
        zone: Some(zone),
        class: Some(class),
        op: Some(req.op.to_string()),
        pid: Some(caller.pid),
        uid: Some(req.uid),
        ..audit::Record::default()
    }
    .path(&path)
    .target(target.as_deref())
}

/// The record of a request's end: its identity plus what ended it.
pub(super) fn end_record(info: &RequestInfo, r: &Resolution) -> (Kind, audit::Record) {
    let mut rec = audit::Record {
        cmdline: None,
        cmdline_b64: None,
        ..request_record(info)
    };
    let kind = match r {
        Resolution::Allow {
            scope,
            approver_uid,
        } => {
            rec.decision = Some("allow".into());
            rec.scope = Some(scope.to_string());
            rec.approver_uid = *approver_uid;
            Kind::Decision
        }
        Resolution::Deny {
            approver_uid,
            reason,
        } => {
            rec.decision = Some("deny".into());
            rec.approver_uid = *approver_uid;
            rec.reason = reason.clone();
            rec.errno = Some("EACCES".into());
            Kind::Decision
        }
        Resolution::Timeout => {
            rec.errno = Some("EACCES".into());
            rec.reason = Some("no decision before the approval timeout".into());
            Kind::Timeout
        }
        Resolution::Withdrawn => {
            rec.errno = Some("EINTR".into());
            rec.reason = Some(
                "the caller was interrupted (a signal it catches, or a fatal one), killed or exited while waiting"
                    .into(),
            );
            Kind::Withdrawn
        }
    };
    (kind, rec)
}

/// Zone, class, path and target of a request, as shown to approvers: a
/// rename shows its source as the path and its destination as the target
/// (both exact).
pub(super) fn describe(req: &AskRequest) -> (String, String, PathBuf, Option<PathBuf>) {
    let zone = req
        .items
        .first()
        .map(|i| i.zone.clone())
        .unwrap_or_default();
    let mut classes: Vec<&str> = Vec::new();
    for i in &req.items {
        let c = class_name(i.class);
        if !classes.contains(&c) {
            classes.push(c);
        }
    }
    let vp = |i: &crate::policy::AskItem| virtual_path(&i.zone, &i.path);
    let write = req
        .items
        .iter()
        .find(|i| i.class == crate::policy::Class::Write);
    let delete = req.items.iter().find(|i| {
        i.class == crate::policy::Class::Delete && Some(&i.path) != write.map(|w| &w.path)
    });
    let (path, target) = match (req.op, write, delete) {
        // A rename shows both ends, whichever items are left to ask (the
        // destination's write may be allowed already, its removal not).
        ("rename" | "exchange", _, _) if req.source.is_some() && req.target.is_some() => {
            (req.source.clone().unwrap_or_default(), req.target.clone())
        }
        ("rename", Some(w), Some(d)) => (vp(d), Some(vp(w))),
        _ => (
            req.items.first().map(vp).unwrap_or_default(),
            req.target.clone(),
        ),
    };
    (zone, classes.join("+"), path, target)
}
