//! TEMPORARY stub: replaced by the config helper's module.
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode { Sandboxed, Direct }
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access { Ro, Rw }
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Approval { PreApproved, Ask, Blocked }
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ApprovalPolicy { pub write: Approval, pub delete: Approval }
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZonePolicy {
    pub access: Access,
    pub approval: ApprovalPolicy,
    pub suffixes: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    pub protect: Vec<String>,
}
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Zone { pub name: String, pub backing: PathBuf, pub policy: ZonePolicy }
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZoneTable { pub mode: SandboxMode, pub zones: Vec<Zone>, pub source: Option<PathBuf> }
pub struct WorkerDecl { pub name: Option<String>, pub file: PathBuf }
pub struct LoadOptions { pub allow_sensitive_roots: bool, pub homes: Vec<PathBuf> }
impl LoadOptions { pub fn from_host(allow_sensitive_roots: bool) -> Self { Self { allow_sensitive_roots, homes: vec![] } } }
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError { pub file: Option<PathBuf>, pub line: Option<usize>, pub field: String, pub message: String }
pub fn load_project(_path: Option<&Path>, cwd: &Path, _opts: &LoadOptions) -> Result<ZoneTable, ConfigError> {
    let z = |n: &str| Zone { name: n.into(), backing: cwd.join(".sandbox").join(n), policy: ZonePolicy { access: Access::Rw, approval: ApprovalPolicy { write: Approval::PreApproved, delete: Approval::PreApproved }, suffixes: None, max_file_bytes: None, protect: vec![] } };
    Ok(ZoneTable { mode: SandboxMode::Sandboxed, zones: vec![z("cache"), z("workspace")], source: None })
}
pub fn load_worker(path: &Path) -> Result<WorkerDecl, ConfigError> { Ok(WorkerDecl { name: None, file: path.into() }) }
pub fn derive(parent: &ZoneTable, _worker: &WorkerDecl) -> Result<ZoneTable, ConfigError> { Ok(parent.clone()) }
pub fn prepare_backing(table: &ZoneTable) -> Result<(), ConfigError> {
    for z in &table.zones { std::fs::create_dir_all(&z.backing).map_err(|e| ConfigError { file: None, line: None, field: z.name.clone(), message: e.to_string() })?; }
    Ok(())
}
impl ZoneTable {
    pub fn zone(&self, name: &str) -> Option<&Zone> { self.zones.iter().find(|z| z.name == name) }
    pub fn render(&self) -> String { format!("{:?}", self.zones) }
}
