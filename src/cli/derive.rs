//! `derive`: the effective zone table, printed without mounting.

use clap::Args;

use super::columns::{zone_patterns, zone_table};
use super::{ConfigArgs, Failure};
use crate::config::ZoneTable;
use crate::control::protocol::ZoneStatus;

#[derive(Debug, Args, Clone)]
pub(crate) struct DeriveArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// One JSON object: config, mode and zones (each as `status --json`
    /// shows a zone).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn derive(a: &DeriveArgs) -> Result<(), Failure> {
    let (table, notes) = super::zone_table_noted(&a.config, &super::cwd()?)?;
    for t in &notes {
        eprintln!("zonemount: {}", super::tightening_note(t));
    }
    if a.json {
        println!("{}", json(&table, &a.config.zone));
    } else {
        print!("{}", render(&table, &a.config.zone));
        print!("{}", isolate_routes(&table));
    }
    Ok(())
}

/// The table as one JSON object: `config` (null for the embedded
/// default and for `--zone`s alone), `zone_args` (the `--zone`s as given),
/// `mode`, `zones`.
pub(crate) fn json(table: &ZoneTable, zone_args: &[String]) -> String {
    let zones: Vec<ZoneStatus> = table.zones.iter().map(ZoneStatus::from).collect();
    let v = serde_json::json!({
        "config": table.source,
        "zone_args": zone_args,
        "mode": table.mode.to_string(),
        "zones": zones,
    });
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// The table for people: zone, backing dir, mode, read/write/delete
/// policy, suffixes, max bytes, protect; then each zone's `hide` and
/// `ask_read` patterns and the sensitive roots it hides.
pub(crate) fn render(table: &ZoneTable, zone_args: &[String]) -> String {
    let source = super::config_origin(table.source.as_deref(), zone_args);
    let mut out = format!("config: {source}\nmode: {}\n", table.mode);
    if table.zones.is_empty() {
        out.push_str("(no zones: the mount is an empty root)\n");
        return out;
    }
    let zones: Vec<ZoneStatus> = table.zones.iter().map(ZoneStatus::from).collect();
    let every_name = |s: Option<&[String]>| s.map_or_else(|| "*".to_owned(), |s| s.join(","));
    out.push_str(&zone_table(&zones, every_name));
    out.push_str(&zone_patterns(&zones));
    out
}

/// What `run --isolate` would do with each zone, nothing keeping it on the
/// daemon: bound straight from its backing dir, or through the daemon
/// and why.
pub(crate) fn isolate_routes(table: &ZoneTable) -> String {
    use crate::policy::direct::{Route, route};
    if table.zones.is_empty() {
        return String::new();
    }
    let mut out = String::from("under run --isolate:\n");
    for z in &table.zones {
        let eligible = route(&z.policy) == Route::Direct;
        let mut r = crate::control::protocol::IsolateRoute::of(&z.policy, eligible);
        if eligible && z.policy.access == crate::config::Access::Rw {
            r.why.push_str("; through the daemon when CMD runs as root, which bound straight could make files setuid root on the host");
        }
        out.push_str(&format!("  {}\n", r.line(&z.name, &z.backing)));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::{Access, Approval, ApprovalPolicy, SandboxMode, Zone, ZonePolicy};

    fn zone(name: &str, access: Access) -> Zone {
        Zone {
            name: name.into(),
            backing: PathBuf::from(format!("/b/{name}")),
            policy: ZonePolicy::plain(access),
        }
    }

    #[test]
    fn every_column_shows() {
        let mut fin = zone("final", Access::Rw);
        fin.policy.approval = ApprovalPolicy {
            write: Approval::Ask,
            delete: Approval::Blocked,
            read: Approval::PreApproved,
        };
        fin.policy.suffixes = Some(vec![".md".into(), ".pdf".into()]);
        fin.policy.max_file_bytes = Some(10_000_000);
        fin.policy.protect = vec![".git".into(), "/docs/final".into()];
        fin.policy.hide = vec!["*.pem".into(), "/secrets".into()];
        fin.policy.ask_read = vec!["*.key".into()];
        let mut data = zone("data", Access::Ro);
        data.policy.approval.read = Approval::Ask;
        let t = ZoneTable {
            mode: SandboxMode::Sandboxed,
            zones: vec![fin, data],
            source: Some("/p/project.yaml".into()),
            max_checkpoints: None,
        };
        assert_eq!(
            render(&t, &[]),
            "config: /p/project.yaml\nmode: sandboxed\n\
             ZONE   BACKING   MODE  READ         WRITE        DELETE       SUFFIXES  MAX BYTES  PROTECT\n\
             final  /b/final  rw    preApproved  ask          blocked      .md,.pdf  10000000   .git,/docs/final\n\
             data   /b/data   ro    ask          preApproved  preApproved  *         -          -\n\
             hide in final: *.pem, /secrets\n\
             ask_read in final: *.key\n"
        );
        let v: serde_json::Value = serde_json::from_str(&json(&t, &[])).unwrap_or_default();
        let fin = &v["zones"][0]["policy"];
        assert_eq!(fin["hide"], serde_json::json!(["*.pem", "/secrets"]));
        assert_eq!(fin["ask_read"], serde_json::json!(["*.key"]));
        assert_eq!(v["zones"][1]["policy"]["approval"]["read"], "ask");
    }

    #[test]
    fn hidden_roots_and_empty_tables_are_said() {
        let mut z = zone("z", Access::Rw);
        z.policy.hidden = vec![".ssh".into(), ".aws".into()];
        let t = ZoneTable {
            mode: SandboxMode::Direct,
            zones: vec![z],
            source: None,
            max_checkpoints: None,
        };
        let out = render(&t, &[]);
        assert!(
            out.starts_with("config: embedded default\nmode: direct\n"),
            "{out}"
        );
        assert!(
            out.ends_with("hidden in z (sensitive roots): .ssh, .aws\n"),
            "{out}"
        );
        let empty = ZoneTable {
            zones: Vec::new(),
            ..t
        };
        assert!(render(&empty, &[]).contains("(no zones: the mount is an empty root)"));
    }
}
