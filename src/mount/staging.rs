//! The stage service of a mount, composed: the filesystem core as the
//! live mount it asks (`stage::service::LiveMount`), the mount's stages,
//! ledger and worker side; and the control socket's handler of
//! `changes`, `commit`, `discard`, `checkpoint`, `checkpoints` and
//! `rewind`, which hands each request to it.

use std::sync::Arc;

use crate::approval::side::WorkerSide;
use crate::audit::Audit;
use crate::control::protocol::Request;
use crate::control::{Peer, StageFn};
use crate::fs::core::Core;
use crate::stage::report::Answer;
use crate::stage::service::{Caller, Reports, StageService};

/// The stage service of the mount whose core is `core`.
pub fn service(core: &Arc<Core>, audit: Option<Arc<Audit>>, side: Arc<WorkerSide>) -> StageService {
    StageService::new(core.clone(), core.stages().cloned(), audit, side)
}

/// The control socket's `changes`, `commit` and `discard`, for a peer.
pub fn stage_fn(service: StageService) -> StageFn {
    Box::new(move |req: &Request, peer: Peer| {
        let by = Caller {
            uid: peer.uid,
            pid: peer.pid,
        };
        match req {
            Request::Changes {
                paths, patch: true, ..
            } => service.patch(paths).map(Answer::Changes),
            Request::Changes { paths, diff, .. } => {
                service.changes(paths, *diff).map(Answer::Changes)
            }
            Request::Commit { paths, force } => {
                service.commit(paths, *force, by).map(Answer::Commit)
            }
            Request::Discard { paths } => service.discard(paths, by).map(Answer::Discard),
            Request::ChangesIn { paths, diff, span } => {
                service.changes_in(paths, *diff, *span).map(Answer::Changes)
            }
            Request::CommitUpto { paths, force, upto } => service
                .commit_upto(paths, *force, Some(*upto), by)
                .map(Answer::Commit),
            // Not decisions: the worker's side may.
            Request::Checkpoint { paths, label } => service
                .checkpoint(paths, label.clone(), by)
                .map(Answer::Checkpoints),
            Request::Checkpoints { paths } => service.checkpoints(paths).map(Answer::Checkpoints),
            Request::Rewind { id, paths } => service.rewind(*id, paths, by).map(Answer::Rewind),
            _ => Err("not a stage request".into()),
        }
    })
}
