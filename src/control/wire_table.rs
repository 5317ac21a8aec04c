//! The control protocol's wire form as a table, taken from the
//! hand-written v1 code before the messages were derived by serde: each
//! request line with what it reads as (or the exact error a client gets),
//! and each typed answer and event with its exact bytes. A change that
//! alters a row changes the protocol.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use serde_json::Value;

use super::protocol::{
    Denied, Done, Listed, Request, STATUS_V1_SAMPLE, Status, StatusAnswer, WatchEvent,
    check_version, event_json, fail_answer, ok_answer,
};
use crate::approval::side::Claim;
use crate::approval::{Decision, Event, RequestInfo, Resolution, Scope};

/// How the server reads one line: JSON, then the version, then the request.
fn read(line: &str) -> Result<Request, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    check_version(&v)?;
    Request::from_value(&v)
}

fn bytes(b: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(b.to_vec()))
}

fn decide(id: u64, decision: Decision) -> Result<Request, String> {
    Ok(Request::Decide { id, decision })
}

fn changes(paths: &[&str], diff: bool) -> Result<Request, String> {
    Ok(Request::Changes {
        paths: paths.iter().map(PathBuf::from).collect(),
        diff,
        patch: false,
    })
}

fn err(s: &str) -> Result<Request, String> {
    Err(s.to_owned())
}

const UNKNOWN_OP_TAIL: &str = "': use list, watch, decide, status, deny_pending, changes, commit, discard, checkpoint, \
     checkpoints, rewind or worker";

fn unknown_op(op: &str) -> Result<Request, String> {
    Err(format!("unknown op '{op}{UNKNOWN_OP_TAIL}"))
}

const NEEDS_ID: &str = "decide needs a numeric \"id\"";
const NEEDS_DECISION: &str = "decide needs \"decision\": \"allow\" or \"deny\"";
const NEEDS_PATHS: &str = "\"paths\" must be a list of strings";
const NEEDS_BOUNDARY: &str =
    "worker needs \"boundary\": \"pid-namespace\", \"session\" or \"isolate\"";

#[test]
fn request_lines_read_as_v1_read_them() {
    let allow = |s| Decision::Allow(s);
    let table: Vec<(&str, Result<Request, String>)> = vec![
        // Version first, whatever else the line holds.
        (
            r#"{"op":"list"}"#,
            err("unsupported protocol version null: this daemon speaks v1"),
        ),
        (
            r#"{"v":2,"op":"list"}"#,
            err("unsupported protocol version 2: this daemon speaks v1"),
        ),
        (
            r#"{"v":"1","op":"list"}"#,
            err("unsupported protocol version \"1\": this daemon speaks v1"),
        ),
        (
            r#"{"v":1.0,"op":"list"}"#,
            err("unsupported protocol version 1.0: this daemon speaks v1"),
        ),
        (
            r#"[1]"#,
            err("unsupported protocol version null: this daemon speaks v1"),
        ),
        // The plain ops; other fields are ignored.
        (r#"{"v":1,"op":"list"}"#, Ok(Request::List)),
        (r#"{"v":1,"op":"list","id":"x","why":5}"#, Ok(Request::List)),
        (r#"{"op":"status","v":1}"#, Ok(Request::Status)),
        (r#"{"v":1,"op":"watch"}"#, Ok(Request::Watch)),
        (r#"{"v":1,"op":"deny_pending"}"#, Ok(Request::DenyPending)),
        // Ops that are not one.
        (r#"{"v":1}"#, unknown_op("")),
        (r#"{"v":1,"op":null}"#, unknown_op("")),
        (r#"{"v":1,"op":0}"#, unknown_op("")),
        (r#"{"v":1,"op":3}"#, unknown_op("")),
        (r#"{"v":1,"op":true}"#, unknown_op("")),
        (r#"{"v":1,"op":["list"]}"#, unknown_op("")),
        (r#"{"v":1,"op":{"list":1}}"#, unknown_op("")),
        (r#"{"v":1,"op":""}"#, unknown_op("")),
        (r#"{"v":1,"op":"frobnicate"}"#, unknown_op("frobnicate")),
        (r#"{"v":1,"op":"List"}"#, unknown_op("List")),
        (r#"{"v":1,"op":"deny-pending"}"#, unknown_op("deny-pending")),
        (r#"{"v":1,"op":"denyPending"}"#, unknown_op("denyPending")),
        (r#"{"v":1,"op":"Request"}"#, unknown_op("Request")),
        (r#"{"v":1,"op":"'"}"#, unknown_op("'")),
        // decide: the id first, then the decision, then the scope.
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"allow"}"#,
            decide(7, allow(Scope::Once)),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"allow","scope":"once"}"#,
            decide(7, allow(Scope::Once)),
        ),
        (
            r#"{"v":1,"op":"decide","id":0,"decision":"allow","scope":"path"}"#,
            decide(0, allow(Scope::Path)),
        ),
        (
            r#"{"v":1,"op":"decide","id":18446744073709551615,"decision":"allow","scope":"zone"}"#,
            decide(u64::MAX, allow(Scope::Zone)),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"allow","scope":null}"#,
            decide(7, allow(Scope::Once)),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"allow","scope":5}"#,
            decide(7, allow(Scope::Once)),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"allow","scope":"galaxy"}"#,
            err("unknown scope 'galaxy': use once, path or zone"),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"allow","scope":"Path"}"#,
            err("unknown scope 'Path': use once, path or zone"),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"deny"}"#,
            decide(7, Decision::Deny),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"deny","scope":null}"#,
            decide(7, Decision::Deny),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"deny","scope":["once"]}"#,
            decide(7, Decision::Deny),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"deny","scope":"once"}"#,
            err("a deny takes no scope"),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"deny","scope":""}"#,
            err("a deny takes no scope"),
        ),
        (r#"{"v":1,"op":"decide","decision":"allow"}"#, err(NEEDS_ID)),
        (
            r#"{"v":1,"op":"decide","id":"7","decision":"allow"}"#,
            err(NEEDS_ID),
        ),
        (
            r#"{"v":1,"op":"decide","id":-1,"decision":"allow"}"#,
            err(NEEDS_ID),
        ),
        (
            r#"{"v":1,"op":"decide","id":7.0,"decision":"allow"}"#,
            err(NEEDS_ID),
        ),
        (
            r#"{"v":1,"op":"decide","id":null,"decision":"allow"}"#,
            err(NEEDS_ID),
        ),
        (r#"{"v":1,"op":"decide","decision":"maybe"}"#, err(NEEDS_ID)),
        (r#"{"v":1,"op":"decide","id":7}"#, err(NEEDS_DECISION)),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"maybe"}"#,
            err(NEEDS_DECISION),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"Allow"}"#,
            err(NEEDS_DECISION),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":true}"#,
            err(NEEDS_DECISION),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":"maybe","scope":"galaxy"}"#,
            err(NEEDS_DECISION),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":{"allow":null}}"#,
            err(NEEDS_DECISION),
        ),
        (
            r#"{"v":1,"op":"decide","id":7,"decision":["deny"]}"#,
            err(NEEDS_DECISION),
        ),
        // changes, commit, discard: paths (exact with paths_b64), flags
        // that are true only as JSON true.
        (r#"{"v":1,"op":"changes"}"#, changes(&[], false)),
        (r#"{"v":1,"op":"changes","diff":true}"#, changes(&[], true)),
        (
            r#"{"v":1,"op":"changes","diff":"yes"}"#,
            changes(&[], false),
        ),
        (r#"{"v":1,"op":"changes","diff":1}"#, changes(&[], false)),
        (
            r#"{"v":1,"op":"changes","patch":true}"#,
            Ok(Request::Changes {
                paths: vec![],
                diff: false,
                patch: true,
            }),
        ),
        (
            r#"{"v":1,"op":"changes","patch":"yes"}"#,
            changes(&[], false),
        ),
        (
            r#"{"v":1,"op":"changes","paths":null}"#,
            changes(&[], false),
        ),
        (r#"{"v":1,"op":"changes","paths":[]}"#, changes(&[], false)),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a","b"],"diff":false}"#,
            changes(&["/w/a", "b"], false),
        ),
        (r#"{"v":1,"op":"changes","paths":"/w/a"}"#, err(NEEDS_PATHS)),
        (r#"{"v":1,"op":"changes","paths":{}}"#, err(NEEDS_PATHS)),
        (r#"{"v":1,"op":"changes","paths":5}"#, err(NEEDS_PATHS)),
        (r#"{"v":1,"op":"changes","paths":false}"#, err(NEEDS_PATHS)),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a",1]}"#,
            err(NEEDS_PATHS),
        ),
        (r#"{"v":1,"op":"changes","paths":[null]}"#, err(NEEDS_PATHS)),
        (
            r#"{"v":1,"op":"changes","paths":["/w/\ufffd"],"paths_b64":["L3cv/w=="]}"#,
            Ok(Request::Changes {
                paths: vec![bytes(b"/w/\xff")],
                diff: false,
                patch: false,
            }),
        ),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a","/w/\ufffd"],"paths_b64":[null,"L3cv/w=="]}"#,
            Ok(Request::Changes {
                paths: vec!["/w/a".into(), bytes(b"/w/\xff")],
                diff: false,
                patch: false,
            }),
        ),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a","/w/b"],"paths_b64":[5,"L3cv/w=="]}"#,
            Ok(Request::Changes {
                paths: vec!["/w/a".into(), bytes(b"/w/\xff")],
                diff: false,
                patch: false,
            }),
        ),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a","/w/b"],"paths_b64":["L3cv/w=="]}"#,
            Ok(Request::Changes {
                paths: vec![bytes(b"/w/\xff"), "/w/b".into()],
                diff: false,
                patch: false,
            }),
        ),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a"],"paths_b64":"L3cv/w=="}"#,
            changes(&["/w/a"], false),
        ),
        (
            r#"{"v":1,"op":"changes","paths":["/w/a"],"paths_b64":["not base64!"]}"#,
            changes(&["/w/a"], false),
        ),
        (
            r#"{"v":1,"op":"changes","paths_b64":["L3cv/w=="]}"#,
            changes(&[], false),
        ),
        (
            r#"{"v":1,"op":"changes","paths":7,"diff":"x"}"#,
            err(NEEDS_PATHS),
        ),
        (
            r#"{"v":1,"op":"commit"}"#,
            Ok(Request::Commit {
                paths: vec![],
                force: false,
            }),
        ),
        (
            r#"{"v":1,"op":"commit","force":true,"paths":["/w/a"]}"#,
            Ok(Request::Commit {
                paths: vec!["/w/a".into()],
                force: true,
            }),
        ),
        (
            r#"{"v":1,"op":"commit","force":"true"}"#,
            Ok(Request::Commit {
                paths: vec![],
                force: false,
            }),
        ),
        (
            r#"{"v":1,"op":"commit","force":true,"paths":[1]}"#,
            err(NEEDS_PATHS),
        ),
        (
            r#"{"v":1,"op":"discard","force":true,"diff":true}"#,
            Ok(Request::Discard { paths: vec![] }),
        ),
        (
            r#"{"v":1,"op":"discard","paths":["/w/a"]}"#,
            Ok(Request::Discard {
                paths: vec!["/w/a".into()],
            }),
        ),
        (r#"{"v":1,"op":"discard","paths":"x"}"#, err(NEEDS_PATHS)),
        // worker: the boundary, and why for a session.
        (
            r#"{"v":1,"op":"worker","boundary":"pid-namespace"}"#,
            Ok(Request::Worker(Claim::OwnPidNamespace)),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":"pid-namespace","why":"x"}"#,
            Ok(Request::Worker(Claim::OwnPidNamespace)),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":"session","why":"no userns"}"#,
            Ok(Request::Worker(Claim::Session {
                why: "no userns".into(),
            })),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":"session"}"#,
            Ok(Request::Worker(Claim::Session { why: String::new() })),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":"session","why":5}"#,
            Ok(Request::Worker(Claim::Session { why: String::new() })),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":"isolate"}"#,
            Ok(Request::Worker(Claim::Isolate)),
        ),
        (r#"{"v":1,"op":"worker"}"#, err(NEEDS_BOUNDARY)),
        (
            r#"{"v":1,"op":"worker","boundary":"pid_namespace"}"#,
            err(NEEDS_BOUNDARY),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":null}"#,
            err(NEEDS_BOUNDARY),
        ),
        (r#"{"v":1,"op":"worker","boundary":1}"#, err(NEEDS_BOUNDARY)),
        (
            r#"{"v":1,"op":"worker","boundary":{"isolate":null}}"#,
            err(NEEDS_BOUNDARY),
        ),
        (
            r#"{"v":1,"op":"worker","boundary":"session","why":{"a":1}}"#,
            Ok(Request::Worker(Claim::Session { why: String::new() })),
        ),
    ];
    let mut wrong = Vec::new();
    for (line, want) in &table {
        let got = read(line);
        if &got != want {
            wrong.push(format!("{line}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_request_that_is_not_an_object_is_an_unknown_op() {
    for v in [
        Value::Null,
        Value::from(1),
        Value::from("list"),
        serde_json::json!(["list"]),
    ] {
        assert_eq!(Request::from_value(&v), unknown_op(""), "{v}");
    }
}

/// A request as the client writes it (one line).
fn line(r: Request) -> String {
    r.to_value().to_string()
}

#[test]
fn requests_go_out_as_v1_sent_them() {
    let table: Vec<(Request, &str)> = vec![
        (Request::List, r#"{"op":"list","v":1}"#),
        (Request::Status, r#"{"op":"status","v":1}"#),
        (Request::Watch, r#"{"op":"watch","v":1}"#),
        (Request::DenyPending, r#"{"op":"deny_pending","v":1}"#),
        (
            Request::Decide {
                id: 7,
                decision: Decision::Allow(Scope::Once),
            },
            r#"{"decision":"allow","id":7,"op":"decide","scope":"once","v":1}"#,
        ),
        (
            Request::Decide {
                id: u64::MAX,
                decision: Decision::Allow(Scope::Zone),
            },
            r#"{"decision":"allow","id":18446744073709551615,"op":"decide","scope":"zone","v":1}"#,
        ),
        (
            Request::Decide {
                id: 8,
                decision: Decision::Deny,
            },
            r#"{"decision":"deny","id":8,"op":"decide","v":1}"#,
        ),
        (
            Request::Changes {
                paths: vec![],
                diff: false,
                patch: false,
            },
            r#"{"diff":false,"op":"changes","paths":[],"v":1}"#,
        ),
        (
            Request::Changes {
                paths: vec!["/w/a".into(), "/w/\u{1b}b\"".into()],
                diff: true,
                patch: false,
            },
            r#"{"diff":true,"op":"changes","paths":["/w/a","/w/\u001bb\""],"v":1}"#,
        ),
        (
            Request::Changes {
                paths: vec![],
                diff: false,
                patch: true,
            },
            r#"{"diff":false,"op":"changes","patch":true,"paths":[],"v":1}"#,
        ),
        (
            Request::Commit {
                paths: vec![],
                force: true,
            },
            r#"{"force":true,"op":"commit","paths":[],"v":1}"#,
        ),
        (
            Request::Commit {
                paths: vec!["/w/ok".into(), bytes(b"/w/a\x1b\xff")],
                force: false,
            },
            r#"{"force":false,"op":"commit","paths":["/w/ok","/w/a\u001b�"],"paths_b64":[null,"L3cvYRv/"],"v":1}"#,
        ),
        (
            Request::Discard {
                paths: vec![bytes(b"/w/\xff")],
            },
            r#"{"op":"discard","paths":["/w/�"],"paths_b64":["L3cv/w=="],"v":1}"#,
        ),
        (
            Request::Worker(Claim::OwnPidNamespace),
            r#"{"boundary":"pid-namespace","op":"worker","v":1}"#,
        ),
        (
            Request::Worker(Claim::Session {
                why: "no user namespaces".into(),
            }),
            r#"{"boundary":"session","op":"worker","v":1,"why":"no user namespaces"}"#,
        ),
        (
            Request::Worker(Claim::Session { why: String::new() }),
            r#"{"boundary":"session","op":"worker","v":1,"why":""}"#,
        ),
        (
            Request::Worker(Claim::Isolate),
            r#"{"boundary":"isolate","op":"worker","v":1}"#,
        ),
    ];
    for (r, want) in table {
        assert_eq!(line(r.clone()), want, "{r:?}");
        // And it reads back as itself.
        assert_eq!(read(want), Ok(r), "{want}");
    }
}

/// The pending request of [`STATUS_V1_SAMPLE`].
fn pending() -> RequestInfo {
    let status: Status =
        serde_json::from_str(STATUS_V1_SAMPLE).unwrap_or_else(|e| panic!("not a Status: {e}"));
    status.pending[0].clone()
}

const PENDING_JSON: &str = r#"{"class":"write","cmdline":"sh -c echo hi > final/a.md","id":1,"items":[{"class":"write","path":"/final/a.md","zone":"final"}],"op":"create","path":"/final/a.md","pid":4242,"time":"2025-01-01T00:00:00Z","timeout_secs":118,"uid":0,"zone":"final"}"#;

#[test]
fn answers_go_out_as_v1_sent_them() {
    let status: Status =
        serde_json::from_str(STATUS_V1_SAMPLE).unwrap_or_else(|e| panic!("not a Status: {e}"));
    let table: Vec<(Value, String)> = vec![
        (ok_answer(&Done {}), r#"{"ok":true,"v":1}"#.into()),
        (
            ok_answer(&Denied { denied: 0 }),
            r#"{"denied":0,"ok":true,"v":1}"#.into(),
        ),
        (
            ok_answer(&Denied { denied: 12 }),
            r#"{"denied":12,"ok":true,"v":1}"#.into(),
        ),
        (
            ok_answer(&Listed { requests: vec![] }),
            r#"{"ok":true,"requests":[],"v":1}"#.into(),
        ),
        (
            ok_answer(&Listed {
                requests: vec![pending()],
            }),
            format!(r#"{{"ok":true,"requests":[{PENDING_JSON}],"v":1}}"#),
        ),
        (
            ok_answer(&StatusAnswer { status }),
            format!(r#"{{"ok":true,"status":{STATUS_V1_SAMPLE},"v":1}}"#),
        ),
        (
            fail_answer("no pending request 9"),
            r#"{"error":"no pending request 9","ok":false,"v":1}"#.into(),
        ),
        (
            fail_answer(format!("unknown op 'x{UNKNOWN_OP_TAIL}")),
            format!(r#"{{"error":"unknown op 'x{UNKNOWN_OP_TAIL}","ok":false,"v":1}}"#),
        ),
        (
            fail_answer(String::from("a \"quoted\"\nline")),
            r#"{"error":"a \"quoted\"\nline","ok":false,"v":1}"#.into(),
        ),
    ];
    for (v, want) in table {
        assert_eq!(v.to_string(), want);
    }
}

/// A change report's answer: a change with who made its first and last
/// change (added to v1 without changing a byte of what was there: the
/// plain change beside it is as before); an actor whose argv is not UTF-8
/// has its bytes in `argv_b64`, one whose command is unknown neither.
#[test]
fn a_change_report_with_actors_goes_out_as_sent() {
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    use crate::actor::{Actor, Command};
    use crate::stage::report::{Answer, Change, ChangesReport, Kind, ZoneChanges};

    let at = |s| UNIX_EPOCH + Duration::from_millis(s);
    let sed = Actor {
        pid: 4242,
        uid: 1000,
        time: at(1_735_689_600_250),
        command: Some(Arc::new(Command {
            comm: b"sed".to_vec(),
            argv: b"sed -i s/hi/hello/ app.py \xff\x1b".to_vec(),
        })),
    };
    let gone = Actor {
        pid: 7,
        uid: 0,
        time: at(1_735_689_600_000),
        command: None,
    };
    let report = ChangesReport {
        zones: vec![ZoneChanges {
            zone: "work".into(),
            staged: false,
            changes: vec![
                Change {
                    first: Some(gone),
                    last: Some(sed),
                    ..Change::plain("app.py".into(), Kind::Modified)
                },
                Change::plain("old".into(), Kind::Deleted),
            ],
            incomplete: false,
            patch: None,
        }],
    };
    let want = r#"{"ok":true,"v":1,"zones":[{"changes":[{"first":{"pid":7,"time":"2025-01-01T00:00:00.000Z","uid":0},"kind":"modified","last":{"argv":"sed -i s/hi/hello/ app.py �\u001b","argv_b64":"c2VkIC1pIHMvaGkvaGVsbG8vIGFwcC5weSD/Gw==","comm":"sed","pid":4242,"time":"2025-01-01T00:00:00.250Z","uid":1000},"path":"app.py"},{"kind":"deleted","path":"old"}],"staged":false,"zone":"work"}]}"#;
    let v = ok_answer(&Answer::Changes(report.clone()));
    assert_eq!(v.to_string(), want);
    // A client reads it back as the typed report.
    let back: ChangesReport = serde_json::from_value(v).unwrap_or_default();
    assert_eq!(back, report);
}

#[test]
fn events_go_out_as_v1_sent_them() {
    let resolved = |id, resolution| Event::Resolved { id, resolution };
    let table: Vec<(Value, String)> = vec![
        (
            event_json(&Event::Requested(pending())),
            format!(r#"{{"event":"request","request":{PENDING_JSON},"v":1}}"#),
        ),
        (
            event_json(&resolved(
                1,
                Resolution::Allow {
                    scope: Scope::Path,
                    approver_uid: Some(1000),
                },
            )),
            r#"{"approver_uid":1000,"event":"resolved","id":1,"outcome":"allow","scope":"path","v":1}"#
                .into(),
        ),
        (
            event_json(&resolved(
                2,
                Resolution::Allow {
                    scope: Scope::Once,
                    approver_uid: None,
                },
            )),
            r#"{"event":"resolved","id":2,"outcome":"allow","scope":"once","v":1}"#.into(),
        ),
        (
            event_json(&resolved(
                3,
                Resolution::Deny {
                    approver_uid: Some(0),
                    reason: Some("not now".into()),
                },
            )),
            r#"{"approver_uid":0,"event":"resolved","id":3,"outcome":"deny","reason":"not now","v":1}"#
                .into(),
        ),
        (
            event_json(&resolved(
                4,
                Resolution::Deny {
                    approver_uid: None,
                    reason: None,
                },
            )),
            r#"{"event":"resolved","id":4,"outcome":"deny","v":1}"#.into(),
        ),
        (
            event_json(&resolved(5, Resolution::Timeout)),
            r#"{"event":"resolved","id":5,"outcome":"timeout","v":1}"#.into(),
        ),
        (
            event_json(&resolved(6, Resolution::Withdrawn)),
            r#"{"event":"resolved","id":6,"outcome":"withdrawn","v":1}"#.into(),
        ),
        (
            WatchEvent::Lagged { missed: 17 }.to_value(),
            r#"{"event":"lagged","missed":17,"v":1}"#.into(),
        ),
    ];
    for (v, want) in table {
        assert_eq!(v.to_string(), want);
        // A client reads each back as the typed event.
        let typed: Result<WatchEvent, _> = serde_json::from_value(v.clone());
        assert!(typed.is_ok(), "{v}");
    }
}
