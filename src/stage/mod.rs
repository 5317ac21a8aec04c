//! Staged zones: a rw zone whose changes land in a stage (an overlay's
//! upper dir in a state directory) instead of the backing dir, until the
//! supervisor commits or discards them.
//!
//! - `tree`: what a stage holds compared to its backing dir (the change
//!   report, diffs), and applying it to the backing dir or dropping it.

pub mod tree;
