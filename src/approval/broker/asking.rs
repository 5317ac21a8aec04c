//! A new ask: refused at once (approvals off, closing, denied before),
//! answered from the caches, joined to the same pending request, or made a
//! request of its own, in the ledger before any approver sees it.

use std::time::Instant;

use super::super::caller::Caller;
use super::super::records::{ask_record, describe, request_record};
use super::super::{
    AskRequest, Continuation, Event, ItemInfo, MAX_PENDING, OTHERS_PENDING, RequestInfo, Verdict,
    Wait, class_name, virtual_path,
};
use super::table::{
    Fp, Key, Outbox, Pending, RetryKey, Waiter, answer, fingerprint, shown, waiter,
};
use super::{Approvals, bump};
use crate::audit::{self, Kind};
use crate::text;

impl Approvals {
    /// Refuse at once, with a ledger record (no request is made).
    fn refuse_now(&self, req: &AskRequest, caller: &Caller, reason: String, then: Continuation) {
        bump(&self.inner.counters.cached_denials, 1);
        self.ledger(
            Kind::Refusal,
            audit::Record {
                errno: Some("EACCES".into()),
                reason: Some(reason),
                ..ask_record(req, caller)
            },
        );
        answer(vec![waiter(0, 0, then)], Verdict::Deny);
    }

    pub(super) fn ask_inner(&self, req: AskRequest, then: Continuation) {
        let caller = Caller::read(req.pid);
        let tid = match req.wait {
            Wait::Detached | Wait::Unheld => 0,
            Wait::Decision | Wait::Bounded(_) => req.pid,
        };
        let until = match req.wait {
            Wait::Bounded(d) => Some(Instant::now() + d),
            Wait::Decision | Wait::Detached | Wait::Unheld => None,
        };
        let me = Waiter {
            tid,
            unique: req.unique,
            until,
            then,
            stopped: false,
        };
        let fps: Vec<Fp> = req.items.iter().map(fingerprint).collect();
        let mut st = self.inner.state.lock();
        if self.inner.settings.no_approvals {
            drop(st);
            let reason = "approvals are off (--no-approvals): every ask is denied".to_string();
            return self.refuse_now(&req, &caller, reason, me.then);
        }
        if let Some(why) = st.closing.clone() {
            drop(st);
            return self.refuse_now(&req, &caller, format!("not asking: {why}"), me.then);
        }
        if let Some(by) = st.denied_by(&fps) {
            drop(st);
            let reason = format!("denied for the rest of the mount by request {by}");
            return self.refuse_now(&req, &caller, reason, me.then);
        }
        let open: Vec<Fp> = fps.iter().filter(|fp| !st.covered(fp)).cloned().collect();
        if open.is_empty() {
            drop(st);
            bump(&self.inner.counters.cached_allows, 1);
            self.log_mutation(&req, &caller, "allowed by an earlier path or zone decision");
            return answer(vec![me], Verdict::Allow);
        }
        let mut sorted = open.clone();
        sorted.sort();
        let retry_key: RetryKey = (sorted.clone(), req.uid, shown(&req));
        if let Some((by, until)) = st.grants.remove(&retry_key) {
            if until > Instant::now() {
                drop(st);
                bump(&self.inner.counters.cached_allows, 1);
                let why = format!(
                    "allowed once by request {by}, decided after the caller was told to retry"
                );
                self.log_mutation(&req, &caller, &why);
                return answer(vec![me], Verdict::Allow);
            }
        }
        if req.wait == Wait::Unheld {
            drop(st);
            let reason = "not asking: this CPU's io_uring queue is all but full of calls waiting for decisions, and one more would hold back every request made on that CPU; decide some first".to_string();
            return self.refuse_now(&req, &caller, reason, me.then);
        }
        let key: Key = (sorted, caller.pid, shown(&req));
        let joined = st
            .by_key
            .get(&key)
            .or_else(|| st.by_retry.get(&retry_key))
            .copied();
        if let Some(id) = joined {
            if let Some(p) = st.pending.get_mut(&id) {
                p.waiters.push(me);
                drop(st);
                // A bounded waiter needs the watcher to wake in time.
                self.inner.tick.notify_all();
                return;
            }
        }
        if st.pending.len() >= MAX_PENDING {
            drop(st);
            let reason = format!(
                "not asking: {MAX_PENDING} requests are pending already; decide some first"
            );
            return self.refuse_now(&req, &caller, reason, me.then);
        }
        let counted = |uid: u32| uid != 0 && uid != self.inner.settings.owner_uid;
        if counted(req.uid) {
            let (mine, others) =
                st.pending
                    .values()
                    .fold((0, 0), |(m, o), p| match counted(p.info.uid) {
                        true => (m + usize::from(p.info.uid == req.uid), o + 1),
                        false => (m, o),
                    });
            let (one, all) = OTHERS_PENDING;
            if mine >= one || others >= all {
                drop(st);
                let reason = format!(
                    "not asking: users other than the mount's owner and root may have {one} requests pending each and {all} together, and uid {} has {mine} ({others} together); decide some first",
                    req.uid
                );
                return self.refuse_now(&req, &caller, reason, me.then);
            }
        }
        let id = st.next_id;
        st.next_id += 1;
        let items: Vec<_> = req
            .items
            .iter()
            .filter(|i| open.contains(&fingerprint(i)))
            .cloned()
            .collect();
        let open_req = AskRequest { items, ..req };
        let (zone, class, path, target) = describe(&open_req);
        let timeout = self.inner.settings.timeout;
        let (path, path_b64) = text::path_for_json(&path);
        let (target, target_b64) = match target.as_deref().map(text::path_for_json) {
            Some((t, b)) => (Some(t), b),
            None => (None, None),
        };
        let (cmdline, cmdline_b64) = text::for_json(&caller.cmdline);
        let info = RequestInfo {
            id,
            zone,
            class,
            op: open_req.op.to_string(),
            path,
            path_b64,
            target,
            target_b64,
            pid: caller.pid,
            uid: open_req.uid,
            cmdline,
            cmdline_b64,
            time: audit::now_rfc3339(),
            timeout_secs: timeout.as_secs(),
            retry: false,
            waiting: u32::from(me.tid != 0),
            items: open_req
                .items
                .iter()
                .map(|i| {
                    ItemInfo::new(
                        class_name(i.class),
                        &i.zone,
                        &virtual_path(&i.zone, &i.path),
                    )
                })
                .collect(),
        };
        if let Some(a) = &self.inner.audit {
            if let Err(e) = a.write(Kind::Request, &request_record(&info)) {
                // Unlogged is unaccountable: refuse rather than ask.
                drop(st);
                tracing::error!("audit log write failed ({e}); denying request {id}");
                return answer(vec![me], Verdict::Deny);
            }
        }
        bump(&self.inner.counters.requests, 1);
        tracing::info!(id, op = %info.op, path = %info.shown_path(), pid = info.pid, "approval requested");
        st.by_key.insert(key.clone(), id);
        let retry = matches!(open_req.wait, Wait::Bounded(_)).then_some(retry_key);
        if let Some(rk) = &retry {
            st.by_retry.insert(rk.clone(), id);
        }
        st.pending.insert(
            id,
            Pending {
                info: info.clone(),
                fps: open,
                key,
                retry,
                deadline: Instant::now() + timeout,
                waiters: vec![me],
                asker_session: caller.session,
                asker_ns: crate::approval::side::pid_ns(caller.pid),
            },
        );
        drop(st);
        self.inner.tick.notify_all();
        self.deliver(Outbox {
            answers: Vec::new(),
            events: vec![Event::Requested(info)],
        });
    }

    fn log_mutation(&self, req: &AskRequest, caller: &Caller, reason: &str) {
        bump(&self.inner.counters.mutations, 1);
        self.ledger(
            Kind::Mutation,
            audit::Record {
                decision: Some("allow".into()),
                reason: Some(reason.into()),
                actor: Some(crate::actor::Actor::read(req.pid, req.uid)),
                ..ask_record(req, caller)
            },
        );
    }
}
