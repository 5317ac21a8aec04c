//! The lines of a `watch` stream: each request waiting and each end of
//! one, as [`WatchEvent`]s.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Versioned;
use crate::approval::{Event, RequestInfo, Resolution, Scope};

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allow,
    Deny,
    Timeout,
    Withdrawn,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::Timeout => "timeout",
            Outcome::Withdrawn => "withdrawn",
        })
    }
}

/// One line of a `watch` stream (with `"v": 1` beside `event`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
// A request (with its exact names) outweighs the other variants; events
// are few and short-lived, and boxing it would change a public type.
#[allow(clippy::large_enum_variant)]
pub enum WatchEvent {
    /// A request is waiting (already, or new).
    Request { request: RequestInfo },
    /// A request is no longer waiting.
    Resolved {
        id: u64,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<Scope>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approver_uid: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The watcher fell behind and missed this many events.
    Lagged { missed: u64 },
}

impl From<&Event> for WatchEvent {
    fn from(ev: &Event) -> Self {
        match ev {
            Event::Requested(info) => WatchEvent::Request {
                request: info.clone(),
            },
            Event::Resolved { id, resolution } => {
                let (outcome, scope, approver_uid, reason) = match resolution {
                    Resolution::Allow {
                        scope,
                        approver_uid,
                    } => (Outcome::Allow, Some(*scope), *approver_uid, None),
                    Resolution::Deny {
                        approver_uid,
                        reason,
                    } => (Outcome::Deny, None, *approver_uid, reason.clone()),
                    Resolution::Timeout => (Outcome::Timeout, None, None, None),
                    Resolution::Withdrawn => (Outcome::Withdrawn, None, None, None),
                };
                WatchEvent::Resolved {
                    id: *id,
                    outcome,
                    scope,
                    approver_uid,
                    reason,
                }
            }
        }
    }
}

impl WatchEvent {
    /// The event as one protocol line's object.
    pub fn to_value(&self) -> Value {
        Versioned::line(self).unwrap_or(Value::Null)
    }
}

/// The JSON line for a broker event.
pub fn event_json(ev: &Event) -> Value {
    WatchEvent::from(ev).to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_their_wire_form() {
        let done = Event::Resolved {
            id: 3,
            resolution: Resolution::Deny {
                approver_uid: Some(0),
                reason: None,
            },
        };
        let v = event_json(&done);
        assert_eq!(
            v.to_string(),
            r#"{"approver_uid":0,"event":"resolved","id":3,"outcome":"deny","v":1}"#
        );
        let typed: Result<WatchEvent, _> = serde_json::from_value(v);
        assert_eq!(typed.ok(), Some(WatchEvent::from(&done)));
        let lagged = WatchEvent::Lagged { missed: 4 }.to_value();
        assert_eq!(lagged.to_string(), r#"{"event":"lagged","missed":4,"v":1}"#);
    }
}
