//! Configuration: project files (which zones exist), worker files (which
//! zones a worker needs), and derivation (what a worker gets) — DESIGN §2.
//!
//! Owns, a file each: the values a configuration is made of (`model`), its
//! one error (`error`), loading a project or worker file, a preset or the
//! embedded default (`load`), a `--zone` argument (`zone_arg`), parsing
//! (`yaml`, `parse`), validation of names, paths and backing dirs
//! (`validate`), the presets (`presets`), and derivation (`derive`). The
//! result is a [`ZoneTable`] that `policy` and `fs` consume; nothing outside
//! this module reads YAML.
//!
//! Assumes: paths are checked when the config is loaded (realpath, overlap,
//! sensitive roots); what the host does to a backing dir afterwards is the
//! business of `backing`, which opens each zone root once and holds it.
//! Defaults: a zone without `mode` is `ro` (secure by default: writable only
//! when it says so; the embedded default's zones say `rw`). A zone without
//! an `approval:` block is `preApproved` for both classes; inside a block, a
//! class left out is `ask` (the seed's "ask (default)"), in a project file
//! and a worker file alike. A project file must have a `sandbox:` section
//! (a typo must not fall back to the embedded default's rw zones); a worker
//! file without one declares no zones.
//! Every error is a [`ConfigError`]: file, line, field path, one line.

mod derive;
mod error;
mod load;
mod model;
mod parse;
pub mod presets;
mod validate;
mod yaml;
mod zone_arg;

#[cfg(test)]
mod tests;

pub use derive::Tightening;
pub use error::ConfigError;
pub use load::{
    DEFAULT_CONFIG, PROJECT_FILE_NAME, load_project, load_project_with, load_worker, parse_project,
    parse_worker,
};
pub use model::{
    Access, Approval, ApprovalBlock, ApprovalPolicy, SandboxMode, WorkerDecl, Zone, ZonePolicy,
    ZoneRequest, ZoneTable,
};
pub use validate::{EXTRA_HOMES_ENV, LoadOptions, SENSITIVE_ROOTS, resolve, sensitive_paths};
pub use zone_arg::CliZone;

/// One derivation step (DESIGN §2 "Derivation"). Chains: fold over workers.
pub fn derive(parent: &ZoneTable, worker: &WorkerDecl) -> Result<ZoneTable, ConfigError> {
    derive::derive(parent, worker).map(|(table, _)| table)
}

/// [`derive`], with each place where the worker asked for something looser
/// than its parent has (and got the parent's) for the caller to tell.
pub fn derive_noted(
    parent: &ZoneTable,
    worker: &WorkerDecl,
) -> Result<(ZoneTable, Vec<Tightening>), ConfigError> {
    derive::derive(parent, worker)
}

/// Sandboxed: create missing backing dirs (mkdir -p). Direct: each must
/// exist and be a directory. Errors name zone and path. Returns the names
/// of the zones whose backing dir this call created.
pub fn prepare_backing(table: &ZoneTable) -> Result<Vec<String>, ConfigError> {
    validate::prepare(table)
}
