//! Words for decisions: every refusal (and, for `zonemount check`, every
//! allow and ask) explained in one message written for an LLM — the path,
//! the reason, and what would work instead.
//!
//! Pure like the rest of `policy`: the zone table (to list alternatives)
//! and the facts of the operation come in as arguments. One place builds
//! every message, so `check`, `status` and the audit log say the same.
//!
//! A file each:
//! - `subject`: what an explanation is about ([`Subject`], [`Action`]) and
//!   is ([`Explanation`]), and how paths are shown;
//! - `words`: the phrases every explanation shares (a zone and what it
//!   allows, suffix lists, the alternatives to offer);
//! - `refusal`: a refusal explained ([`explain`]);
//! - `decision`: any decision, allow and ask too, for `check`
//!   ([`explain_decision`]);
//! - `worker`: a refusal as the worker is told it ([`for_worker`]).

mod decision;
mod refusal;
mod subject;
#[cfg(test)]
mod tests;
mod words;
mod worker;

pub use decision::explain_decision;
pub use refusal::explain;
pub use subject::{Action, Explanation, Subject, exact, shown};
pub use worker::for_worker;
