//! Moves carry their rules: a rename, an exchange or a link is judged by
//! what it moves and what it displaces, with the real kinds of both ends.
//! The cases an attacker tried (issue 27), then a property test: random
//! trees × random patterns × random rename/exchange/link sequences,
//! checked against a model of what must stay hidden, protected or read
//! with approval.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::config::{Access, Approval, ApprovalPolicy, Zone, ZonePolicy};

fn as_str(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn rules(hide: &[&str], protect: &[&str], ask_read: &[&str], hidden: &[&str]) -> ZoneRules {
    let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    ZoneRules::compile(&Zone {
        name: "z".into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            access: Access::Rw,
            approval: ApprovalPolicy {
                write: Approval::PreApproved,
                delete: Approval::PreApproved,
                read: Approval::PreApproved,
            },
            suffixes: None,
            max_file_bytes: None,
            protect: list(protect),
            hidden: hidden.iter().map(PathBuf::from).collect(),
            hide: list(hide),
            ask_read: list(ask_read),
            staged: false,
        },
    })
    .unwrap()
}

fn mv(z: &ZoneRules, from: &str, to: &str, is_dir: bool, to_is_dir: Option<bool>) -> Decision {
    decide(&Op::Rename {
        from: Loc::in_zone(z, Path::new(from)),
        to: Loc::in_zone(z, Path::new(to)),
        is_dir,
        to_is_dir,
        exchange: false,
    })
}

fn xchg(z: &ZoneRules, from: &str, to: &str, is_dir: bool, to_is_dir: bool) -> Decision {
    decide(&Op::Rename {
        from: Loc::in_zone(z, Path::new(from)),
        to: Loc::in_zone(z, Path::new(to)),
        is_dir,
        to_is_dir: Some(to_is_dir),
        exchange: true,
    })
}

fn ln(z: &ZoneRules, from: &str, to: &str) -> Decision {
    decide(&Op::Link {
        from: Loc::in_zone(z, Path::new(from)),
        to: Loc::in_zone(z, Path::new(to)),
    })
}

fn asks_read(d: &Decision, path: &str) -> bool {
    matches!(d, Decision::Ask(items)
        if items.iter().any(|i| i.class == Class::Read && i.path == Path::new(path)))
}

#[test]
fn exchanging_a_file_with_a_dir_that_holds_a_hidden_path_is_refused() {
    let z = rules(&["/config/credentials.json"], &[], &[], &[".config/gh"]);
    let refused = Decision::Refuse(crate::error::Refusal::SensitiveInside);
    // A file the worker owns, exchanged with the directory: the directory
    // would land at the file's name.
    assert_eq!(xchg(&z, "mine.txt", "config", false, true), refused);
    assert_eq!(xchg(&z, "config", "mine.txt", true, false), refused);
    assert_eq!(xchg(&z, "mine.txt", ".config", false, true), refused);
    // A plain rename of the same directories was refused already.
    assert_eq!(mv(&z, "config", "c2", true, None), refused);
    // Unrelated exchanges stay allowed.
    assert_eq!(xchg(&z, "mine.txt", "other", false, true), Decision::Allow);
    assert_eq!(xchg(&z, "a.txt", "b.txt", false, false), Decision::Allow);
}

#[test]
fn exchanging_a_file_with_a_protected_dir_is_refused() {
    let z = rules(&[], &["/docs/final", "keep/"], &[], &[]);
    let refused = Decision::Refuse(crate::error::Refusal::Protected);
    // `docs` holds the anchored protected path; `keep` is protected itself
    // by a pattern for directories only (the source's kind, a file, never
    // matched it).
    assert_eq!(xchg(&z, "mine.txt", "docs", false, true), refused);
    assert_eq!(xchg(&z, "mine.txt", "keep", false, true), refused);
    assert_eq!(xchg(&z, "sub/mine.txt", "sub/keep", false, true), refused);
    // A directory moved to where a protected path would be inside it.
    assert_eq!(mv(&z, "mydir", "docs", true, None), refused);
    assert_eq!(xchg(&z, "mine.txt", "notes", false, true), Decision::Allow);
}

#[test]
fn any_depth_patterns_that_name_a_dir_keep_it_at_every_depth() {
    let z = rules(&["**/secrets/key"], &["**/vault/seal"], &[], &[]);
    let hidden = Decision::Refuse(crate::error::Refusal::SensitiveInside);
    let protected = Decision::Refuse(crate::error::Refusal::Protected);
    for dir in ["secrets", "a/secrets", "a/b/secrets", "a/b/c/d/secrets"] {
        assert_eq!(mv(&z, dir, "elsewhere", true, None), hidden, "{dir}");
        assert_eq!(xchg(&z, "f", dir, false, true), hidden, "{dir}");
    }
    for dir in ["vault", "a/b/vault", "a/b/c/vault"] {
        assert_eq!(mv(&z, dir, "elsewhere", true, None), protected, "{dir}");
    }
    // Moving their parents keeps the path's tail: allowed, at any depth.
    for dir in ["a", "a/b", "a/b/c", "top"] {
        assert_eq!(mv(&z, dir, "q", true, None), Decision::Allow, "{dir}");
    }
}

#[test]
fn read_asked_files_moved_or_linked_out_ask_to_be_read() {
    let z = rules(&[], &[], &["config/prod/**", "*.key", "vault/"], &[]);
    // A file: renamed or linked to a name no pattern asks for.
    assert!(asks_read(
        &mv(&z, "config/prod/db", "db", false, None),
        "config/prod/db"
    ));
    assert!(asks_read(&ln(&z, "config/prod/db", "db"), "config/prod/db"));
    assert!(asks_read(
        &mv(&z, "id.key", "id.txt", false, None),
        "id.key"
    ));
    assert!(asks_read(&ln(&z, "x/id.key", "x/id"), "x/id.key"));
    // A directory a pattern reaches into, or one matched itself.
    assert!(asks_read(
        &mv(&z, "config/prod", "p", true, None),
        "config/prod"
    ));
    assert!(asks_read(&mv(&z, "config", "c", true, None), "config"));
    assert!(asks_read(&mv(&z, "a/vault", "a/v", true, None), "a/vault"));
    // Exchanged: the displaced one moves too.
    assert!(asks_read(
        &xchg(&z, "mine", "config", false, true),
        "config"
    ));
    // Still read with approval where it lands: nothing to ask.
    assert_eq!(
        mv(&z, "config/prod/db", "config/prod/db2", false, None),
        Decision::Allow
    );
    assert_eq!(mv(&z, "a.key", "b.key", false, None), Decision::Allow);
    assert_eq!(mv(&z, "notes", "n2", false, None), Decision::Allow);
    assert_eq!(mv(&z, "src", "lib", true, None), Decision::Allow);
}

// ---- the model ------------------------------------------------------------

/// Names a tree is made of, and patterns are made from.
const NAMES: &[&str] = &["a", "b", "secrets", "key", "docs", "final", "c", "gh"];

/// A tree: every path (components) and the identity and kind of what is
/// there. An identity keeps its flags wherever it moves.
type Tree = BTreeMap<Vec<String>, (usize, bool)>;

fn p(comps: &[String]) -> PathBuf {
    comps.iter().collect()
}

fn tree_strategy() -> impl Strategy<Value = Tree> {
    let path = prop::collection::vec(prop::sample::select(NAMES), 1..5);
    prop::collection::vec((path, any::<bool>()), 1..14).prop_map(|entries| {
        let mut tree = Tree::new();
        for (comps, is_dir) in entries {
            let comps: Vec<String> = comps.iter().map(|s| s.to_string()).collect();
            // Parents are directories; a file already there stays the
            // leaf it is (this entry is dropped).
            let fits = (1..comps.len()).all(|i| tree.get(&comps[..i]).is_none_or(|e| e.1));
            if !fits || tree.contains_key(&comps) {
                continue;
            }
            for i in 1..comps.len() {
                let id = tree.len();
                tree.entry(comps[..i].to_vec()).or_insert((id, true));
            }
            let id = tree.len();
            tree.insert(comps, (id, is_dir));
        }
        tree
    })
}

/// A pattern of one of the shapes gitignore has: a name at any depth,
/// for directories only, anchored, deep, after `**/`, with `/**` inside
/// or at the end, negated.
fn pattern_strategy() -> impl Strategy<Value = String> {
    let name = prop::sample::select(NAMES);
    (0..8u8, name.clone(), name.clone(), name).prop_map(|(shape, x, y, w)| match shape {
        0 => x.to_string(),
        1 => format!("{x}/"),
        2 => format!("/{x}/{y}"),
        3 => format!("**/{x}/{y}"),
        4 => format!("{x}/**"),
        5 => format!("{x}/**/{y}"),
        6 => format!("/{x}/{y}/{w}"),
        _ => format!("!{x}"),
    })
}

#[derive(Debug, Clone)]
enum Move {
    Rename(usize, usize, String),
    Exchange(usize, usize),
    Link(usize, usize, String),
}

fn moves_strategy() -> impl Strategy<Value = Vec<Move>> {
    let ix = 0..64usize;
    let name = prop::sample::select(NAMES).prop_map(str::to_string);
    let one = prop_oneof![
        (ix.clone(), ix.clone(), name.clone()).prop_map(|(a, b, n)| Move::Rename(a, b, n)),
        (ix.clone(), ix.clone()).prop_map(|(a, b)| Move::Exchange(a, b)),
        (ix.clone(), ix, name).prop_map(|(a, b, n)| Move::Link(a, b, n)),
    ];
    prop::collection::vec(one, 1..12)
}

/// What must hold of an identity wherever it is.
#[derive(Debug, Default)]
struct Flags {
    hidden: BTreeSet<usize>,
    protected: BTreeSet<usize>,
    read_asked: BTreeSet<usize>,
}

fn hidden(z: &ZoneRules, path: &Path) -> bool {
    z.is_sensitive(path) || z.hidden_by(path).is_some()
}

fn read_asked(z: &ZoneRules, path: &Path, is_dir: bool) -> bool {
    !is_dir && z.ask_read_by(path).is_some()
}

fn flags(z: &ZoneRules, tree: &Tree) -> Flags {
    let mut f = Flags::default();
    for (comps, &(id, is_dir)) in tree {
        let path = p(comps);
        if hidden(z, &path) {
            f.hidden.insert(id);
        }
        if z.is_protected(&path, is_dir) {
            f.protected.insert(id);
        }
        if read_asked(z, &path, is_dir) {
            f.read_asked.insert(id);
        }
    }
    f
}

/// The path `m` names: an existing entry (by index, wrapping), or a new
/// name in an existing directory (or the zone root).
fn existing(tree: &Tree, i: usize) -> Vec<String> {
    let keys: Vec<_> = tree.keys().collect();
    keys[i % keys.len()].clone()
}

fn new_name_in(tree: &Tree, i: usize, name: &str) -> Vec<String> {
    let dirs: Vec<_> = tree.iter().filter(|(_, e)| e.1).map(|(k, _)| k).collect();
    let mut at = match i % (dirs.len() + 1) {
        0 => vec![],
        n => dirs[n - 1].clone(),
    };
    at.push(name.to_string());
    at
}

fn subtree(tree: &Tree, root: &[String]) -> Vec<Vec<String>> {
    tree.keys()
        .filter(|k| k.starts_with(root))
        .cloned()
        .collect()
}

/// Move everything at and below `from` to `to` (which holds nothing).
fn relocate(tree: &mut Tree, from: &[String], to: &[String]) {
    let moved: Vec<_> = subtree(tree, from)
        .into_iter()
        .filter_map(|k| tree.remove(&k).map(|e| (k, e)))
        .collect();
    for (k, e) in moved {
        let mut nk = to.to_vec();
        nk.extend_from_slice(&k[from.len()..]);
        tree.insert(nk, e);
    }
}

/// Apply `m` as the kernel would, if it is a valid call and `decide`
/// lets it through (approving what it asks). Returns the identities whose
/// reading an approval covered.
fn apply(z: &ZoneRules, tree: &mut Tree, m: &Move) -> BTreeSet<usize> {
    let mut approved = BTreeSet::new();
    let kind = |t: &Tree, k: &[String]| t.get(k).map(|e| e.1);
    let (from, to, exchange, link) = match m {
        Move::Rename(a, b, n) => {
            let to = if a % 3 == 0 {
                existing(tree, *b)
            } else {
                new_name_in(tree, *b, n)
            };
            (existing(tree, *a), to, false, false)
        }
        Move::Exchange(a, b) => (existing(tree, *a), existing(tree, *b), true, false),
        Move::Link(a, b, n) => (existing(tree, *a), new_name_in(tree, *b, n), false, true),
    };
    let Some(is_dir) = kind(tree, &from) else {
        return approved;
    };
    let to_is_dir = kind(tree, &to);
    // What the kernel refuses before asking anyone.
    let inside = |x: &[String], y: &[String]| x.len() > y.len() && x.starts_with(y);
    if from == to || inside(&to, &from) || inside(&from, &to) {
        return approved;
    }
    if link && (is_dir || to_is_dir.is_some()) {
        return approved;
    }
    if exchange && to_is_dir.is_none() {
        return approved;
    }
    if !exchange && !link {
        match (is_dir, to_is_dir) {
            (_, None) => {}
            (true, Some(true)) if subtree(tree, &to).len() == 1 => {}
            (false, Some(false)) => {}
            _ => return approved,
        }
    }
    let (fp, tp) = (p(&from), p(&to));
    let (fl, tl) = (Loc::in_zone(z, &fp), Loc::in_zone(z, &tp));
    let op = if link {
        Op::Link { from: fl, to: tl }
    } else {
        Op::Rename {
            from: fl,
            to: tl,
            is_dir,
            to_is_dir,
            exchange,
        }
    };
    match decide(&op) {
        Decision::Refuse(_) => return approved,
        Decision::Allow => {}
        Decision::Ask(items) => {
            // The supervisor allows it: reading what was asked about is
            // approved from now on.
            for item in items.iter().filter(|i| i.class == Class::Read) {
                let comps: Vec<String> = item
                    .path
                    .iter()
                    .map(|c| c.to_string_lossy().into_owned())
                    .collect();
                for k in subtree(tree, &comps) {
                    approved.insert(tree[&k].0);
                }
            }
        }
    }
    if link {
        let e = tree[&from];
        tree.insert(to, e);
    } else if exchange {
        let tmp = vec!["\0swap".to_string()];
        relocate(tree, &from, &tmp);
        relocate(tree, &to, &from);
        relocate(tree, &tmp, &to);
    } else {
        if to_is_dir.is_some() {
            tree.remove(&to);
        }
        relocate(tree, &from, &to);
    }
    approved
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn moves_never_carry_anything_past_its_rules(
        tree in tree_strategy(),
        hide in prop::collection::vec(pattern_strategy(), 0..3),
        protect in prop::collection::vec(pattern_strategy(), 0..3),
        ask_read in prop::collection::vec(pattern_strategy(), 0..3),
        sensitive in any::<bool>(),
        moves in moves_strategy(),
    ) {
        let hidden_roots: &[&str] = if sensitive { &["c/gh"] } else { &[] };
        let z = rules(&as_str(&hide), &as_str(&protect), &as_str(&ask_read), hidden_roots);
        let mut tree = tree;
        let before = flags(&z, &tree);
        let mut approved = BTreeSet::new();
        for m in &moves {
            approved.extend(apply(&z, &mut tree, m));
            for (comps, &(id, is_dir)) in &tree {
                let path = p(comps);
                prop_assert!(
                    !before.hidden.contains(&id) || hidden(&z, &path),
                    "hidden entry {id} visible at {path:?} after {m:?}"
                );
                prop_assert_eq!(
                    before.protected.contains(&id),
                    z.is_protected(&path, is_dir),
                    "entry {} protected-ness changed at {:?} after {:?}", id, path, m
                );
                prop_assert!(
                    !before.read_asked.contains(&id)
                        || approved.contains(&id)
                        || read_asked(&z, &path, is_dir),
                    "read-asked entry {id} readable unasked at {path:?} after {m:?}"
                );
            }
        }
    }
}
