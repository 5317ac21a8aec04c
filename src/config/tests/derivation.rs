//! Derivation of a worker's table from its parent's: only declared zones,
//! the stricter mode and approval, suffixes, size and protect, chains.

use super::*;

fn zone(name: &str, access: Access) -> Zone {
    Zone {
        name: name.into(),
        backing: PathBuf::from("/b").join(name),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy::default(),
            suffixes: None,
            max_file_bytes: None,
            protect: vec![],
            hidden: vec![],
            hide: vec![],
            ask_read: vec![],
            staged: false,
        },
    }
}

fn table(zones: Vec<Zone>) -> ZoneTable {
    ZoneTable {
        mode: SandboxMode::Sandboxed,
        zones,
        source: Some("/p/project.yaml".into()),
        max_checkpoints: None,
    }
}

#[test]
fn derive_keeps_only_declared_zones_with_parent_backing() {
    let parent = table(vec![
        zone("data", Access::Rw),
        zone("ws", Access::Rw),
        zone("cache", Access::Rw),
    ]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    - name: data\n      mode: rw\n"),
    )
    .unwrap();
    assert_eq!(t.zones, vec![zone("data", Access::Rw)]);
    assert_eq!(t.mode, parent.mode);
    assert_eq!(t.source, parent.source);
}

#[test]
fn derive_without_sandbox_is_empty() {
    let parent = table(vec![zone("data", Access::Rw)]);
    assert!(
        derive(&parent, &worker("name: x\n"))
            .unwrap()
            .zones
            .is_empty()
    );
    assert!(
        derive(&parent, &worker("sandbox:\n  zones: []\n"))
            .unwrap()
            .zones
            .is_empty()
    );
}

#[test]
fn derive_missing_zone_is_an_error() {
    let parent = table(vec![zone("ws", Access::Rw)]);
    let e = derive(
        &parent,
        &worker("name: x\nsandbox:\n  zones:\n    - name: data\n"),
    )
    .unwrap_err();
    assert_err(
        &e,
        "child.worker",
        4,
        "sandbox.zones.data",
        "worker 'x' needs zone 'data', which its parent does not have",
    );
    // No name: the file stem.
    let e = derive(&parent, &worker("sandbox:\n  zones:\n    data: {}\n")).unwrap_err();
    assert!(
        e.message.starts_with("worker 'child' needs zone 'data'"),
        "{e}"
    );
}

#[test]
fn derive_mode() {
    let parent = table(vec![zone("data", Access::Ro), zone("ws", Access::Rw)]);
    let e = derive(
        &parent,
        &worker("name: x\nsandbox:\n  zones:\n    - name: data\n      mode: rw\n"),
    )
    .unwrap_err();
    assert_err(
        &e,
        "child.worker",
        5,
        "sandbox.zones.data.mode",
        "worker 'x' requests 'rw' for zone 'data' but parent only has 'ro'",
    );
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    data: {}\n    ws: {}\n"),
    )
    .unwrap();
    assert_eq!(
        t.zone("data").unwrap().policy.access,
        Access::Ro,
        "omitted: parent's"
    );
    assert_eq!(
        t.zone("ws").unwrap().policy.access,
        Access::Rw,
        "omitted: parent's"
    );
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    ws: { mode: ro }\n    data: { mode: ro }\n"),
    )
    .unwrap();
    assert_eq!(t.zone("ws").unwrap().policy.access, Access::Ro);
    assert_eq!(t.zone("data").unwrap().policy.access, Access::Ro);
}

#[test]
fn derive_approval_is_the_stricter() {
    use Approval::*;
    let all = [PreApproved, Ask, Blocked];
    for p in all {
        for w in all {
            let mut z = zone("d", Access::Rw);
            z.policy.approval = ApprovalPolicy {
                write: p,
                delete: p,
                read: Approval::PreApproved,
            };
            let parent = table(vec![z]);
            let text = format!("sandbox:\n  zones:\n    d: {{ approval: {{ write: {w} }} }}\n");
            let t = derive(&parent, &worker(&text)).unwrap();
            let got = t.zones[0].policy.approval;
            assert_eq!(got.write, p.max(w), "{p} vs {w}");
            assert_eq!(
                got.delete,
                p.max(Ask),
                "delete left out of the block: ask, or the parent's if stricter"
            );
        }
    }
    // No block at all: the parent's, whatever it is.
    for p in all {
        let mut z = zone("d", Access::Rw);
        z.policy.approval = ApprovalPolicy {
            write: p,
            delete: p,
            read: Approval::PreApproved,
        };
        let parent = table(vec![z]);
        let t = derive(
            &parent,
            &worker("sandbox:\n  zones:\n    d: { mode: rw }\n"),
        )
        .unwrap();
        assert_eq!(t.zones[0].policy.approval, parent.zones[0].policy.approval);
    }
    assert!(PreApproved < Ask && Ask < Blocked);
    assert!(Access::Ro < Access::Rw);
}

#[test]
fn derive_suffixes_size_and_protect() {
    let mut z = zone("d", Access::Rw);
    z.policy.suffixes = Some(vec![".md".into(), ".gz".into(), ".txt".into()]);
    z.policy.max_file_bytes = Some(100);
    z.policy.protect = vec![".git".into()];
    let parent = table(vec![z, zone("free", Access::Rw)]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d:\n      suffixes: [.tar.gz, .md, .pdf]\n      max_file_bytes: 1000\n      protect: [.git, /out]\n    free:\n      suffixes: [.rs]\n      max_file_bytes: 5\n      protect: [target]\n"),
    )
    .unwrap();
    let d = &t.zone("d").unwrap().policy;
    assert_eq!(d.suffixes, Some(vec![".md".into(), ".tar.gz".into()]));
    assert_eq!(d.max_file_bytes, Some(100));
    assert_eq!(d.protect, vec![".git".to_string(), "/out".into()]);
    let free = &t.zone("free").unwrap().policy;
    assert_eq!(free.suffixes, Some(vec![".rs".into()]), "whichever exists");
    assert_eq!(free.max_file_bytes, Some(5));
    assert_eq!(free.protect, vec!["target".to_string()]);
    // Parent-only values survive a bare declaration.
    let t = derive(&parent, &worker("sandbox:\n  zones:\n    d: {}\n")).unwrap();
    assert_eq!(t.zones[0].policy, parent.zones[0].policy);
    // Disjoint suffixes leave no names (directories stay visible).
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d: { suffixes: [.pdf] }\n"),
    )
    .unwrap();
    assert_eq!(t.zones[0].policy.suffixes, Some(vec![]));
}

#[test]
fn derive_chains_of_three() {
    let f = Fixture::new();
    let project = f
        .load("sandbox:\n  zones:\n    data: { mode: ro }\n    ws:\n      mode: rw\n      suffixes: [.md, .txt, .csv]\n    cache: { mode: rw }\n")
        .unwrap();
    let parent = f.worker(
        "parent.worker",
        "---\nname: parent\nsandbox:\n  zones:\n    - name: data\n    - name: ws\n      mode: rw\n      approval: { delete: ask }\n---\n",
    );
    let child = f.worker(
        "child.worker",
        "name: child\nsandbox:\n  zones:\n    ws:\n      suffixes: [.md, .txt]\n      max_file_bytes: 50\n",
    );
    let grandchild = f.worker(
        "grandchild.worker",
        "name: grandchild\nsandbox:\n  zones:\n    ws:\n      mode: ro\n      approval: { write: blocked }\n      suffixes: [.md]\n      max_file_bytes: 500\n",
    );
    let t = [&parent, &child, &grandchild]
        .into_iter()
        .try_fold(project.clone(), |t, w| derive(&t, w))
        .unwrap();
    assert_eq!(t.zones.len(), 1);
    let ws = &t.zones[0];
    assert_eq!(ws.backing, project.zone("ws").unwrap().backing);
    assert_eq!(ws.policy.access, Access::Ro);
    assert_eq!(ws.policy.approval.write, Approval::Blocked);
    assert_eq!(ws.policy.approval.delete, Approval::Ask);
    assert_eq!(ws.policy.suffixes, Some(vec![".md".into()]));
    assert_eq!(ws.policy.max_file_bytes, Some(50));

    // A grandchild can't get back what the child dropped ...
    let greedy = f.worker("greedy.worker", "sandbox:\n  zones:\n    - name: data\n");
    let after_child = derive(&derive(&project, &parent).unwrap(), &child).unwrap();
    let e = derive(&after_child, &greedy).unwrap_err();
    assert!(
        e.message.contains("worker 'greedy' needs zone 'data'"),
        "{e}"
    );
    // ... nor rw once an ancestor made it ro.
    let upgrade = f.worker(
        "up.worker",
        "sandbox:\n  zones:\n    - name: ws\n      mode: rw\n",
    );
    let ro = derive(&after_child, &grandchild).unwrap();
    let e = derive(&ro, &upgrade).unwrap_err();
    assert_err(
        &e,
        "up.worker",
        4,
        "sandbox.zones.ws.mode",
        "requests 'rw' for zone 'ws' but parent only has 'ro'",
    );
}

#[test]
fn each_tightening_of_a_request_is_noted() {
    let mut z = zone("final", Access::Rw);
    z.policy.approval = ApprovalPolicy {
        write: Approval::Ask,
        delete: Approval::Blocked,
        read: Approval::PreApproved,
    };
    z.policy.suffixes = Some(vec![".md".into()]);
    z.policy.max_file_bytes = Some(100);
    let parent = table(vec![z, zone("ws", Access::Rw)]);
    let w = worker(
        "name: loose\nsandbox:\n  zones:\n    final:\n      approval: { write: preApproved }\n      suffixes: [.md, .txt]\n      max_file_bytes: 1000\n    ws:\n      approval: { write: blocked, delete: preApproved }\n      suffixes: [.rs]\n      max_file_bytes: 5\n",
    );
    let (t, notes) = derive_noted(&parent, &w).unwrap();
    assert_eq!(t, derive(&parent, &w).unwrap());
    let said: Vec<(&str, &str, &str, &str)> = notes
        .iter()
        .map(|n| (n.zone.as_str(), n.field, n.asked.as_str(), n.got.as_str()))
        .collect();
    // The implicit `delete: ask` of final's block is not noted (it was not
    // written); nothing of ws was looser than its parent.
    assert_eq!(
        said,
        [
            ("final", "approval.write", "preApproved", "ask"),
            ("final", "suffixes", "[.md, .txt]", "[.md]"),
            ("final", "max_file_bytes", "1000", "100"),
        ]
    );
    let line = notes[0].to_string();
    assert_eq!(
        line,
        "dir/child.worker:4: worker 'loose' asked approval.write: preApproved for zone 'final', but its parent's is stricter: it gets ask"
    );
    // Nothing looser, nothing noted.
    let (_, none) = derive_noted(
        &parent,
        &worker("sandbox:\n  zones:\n    final: { mode: ro }\n"),
    )
    .unwrap();
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn a_block_leaving_a_class_out_asks_for_it() {
    // `{write: ask}` gates deletes too; `{delete: blocked}` makes writes ask.
    let parent = table(vec![zone("d", Access::Rw)]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d: { approval: { write: ask } }\n"),
    )
    .unwrap();
    assert_eq!(
        t.zones[0].policy.approval,
        ApprovalPolicy {
            write: Approval::Ask,
            delete: Approval::Ask,
            read: Approval::PreApproved
        }
    );
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d: { approval: { delete: blocked } }\n"),
    )
    .unwrap();
    assert_eq!(
        t.zones[0].policy.approval,
        ApprovalPolicy {
            write: Approval::Ask,
            delete: Approval::Blocked,
            read: Approval::PreApproved
        }
    );
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d: { approval: {} }\n"),
    )
    .unwrap();
    assert_eq!(
        t.zones[0].policy.approval,
        ApprovalPolicy {
            write: Approval::Ask,
            delete: Approval::Ask,
            read: Approval::PreApproved
        }
    );
}

#[test]
fn a_worker_may_stage_a_rw_zone_never_unstage_a_staged_one() {
    let mut staged = zone("st", Access::Rw);
    staged.policy.staged = true;
    let parent = table(vec![
        zone("ws", Access::Rw),
        staged,
        zone("data", Access::Ro),
    ]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    ws: { staged: true }\n    st: {}\n    data: {}\n"),
    )
    .unwrap();
    assert!(t.zone("ws").unwrap().policy.staged, "asked for");
    assert!(t.zone("st").unwrap().policy.staged, "inherited");
    assert!(!t.zone("data").unwrap().policy.staged);
    // Read-only for the worker: nothing to stage, so not staged.
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    st: { mode: ro }\n"),
    )
    .unwrap();
    assert_eq!(
        (
            t.zone("st").unwrap().policy.access,
            t.zone("st").unwrap().policy.staged
        ),
        (Access::Ro, false)
    );
    let e = derive(
        &parent,
        &worker("name: x\nsandbox:\n  zones:\n    st:\n      staged: false\n"),
    )
    .unwrap_err();
    assert_err(
        &e,
        "child.worker",
        5,
        "sandbox.zones.st.staged",
        "worker 'x' asks for 'staged: false' on zone 'st' but its parent stages it",
    );
    let e = derive(
        &parent,
        &worker("name: x\nsandbox:\n  zones:\n    data:\n      staged: true\n"),
    )
    .unwrap_err();
    assert_err(
        &e,
        "child.worker",
        5,
        "sandbox.zones.data.staged",
        "which it gets read-only",
    );
}

#[test]
fn a_worker_adds_hide_patterns_and_keeps_its_parents() {
    let mut z = zone("ws", Access::Rw);
    z.policy.hide = vec![".env".into()];
    let parent = table(vec![z]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    ws: { hide: [\"*.pem\", \".env\"] }\n"),
    )
    .unwrap();
    assert_eq!(t.zone("ws").unwrap().policy.hide, [".env", "*.pem"]);
    let t = derive(&parent, &worker("sandbox:\n  zones:\n    ws: {}\n")).unwrap();
    assert_eq!(t.zone("ws").unwrap().policy.hide, [".env"], "never dropped");
}
