//! [`decide`]: every rule of DESIGN §3 in its order of precedence — hidden,
//! root-level, cross-zone, read-only or protected, suffix, size — then the
//! zone's approval policy. Pure: the caller supplies every fact.

use std::path::Path;

use super::{AskItem, Class, Decision, Loc, Op, ZoneRules};
use crate::config::{Access, Approval};
use crate::error::Refusal;

/// Decide an operation. Pure: the caller supplies every fact.
pub fn decide(op: &Op<'_>) -> Decision {
    if let Err(r) = op.places().into_iter().flatten().try_for_each(sensitive) {
        return Decision::Refuse(r);
    }
    match structural(op) {
        Err(r) => Decision::Refuse(r),
        Ok(needs) => match by_approval(op, &needs) {
            // A device node is never made: refused once the rules before
            // the approval policy have spoken, before anyone is asked.
            Decision::Refuse(r) => Decision::Refuse(r),
            _ if matches!(op, Op::Device { .. }) => Decision::Refuse(Refusal::Device),
            d => d,
        },
    }
}

/// Every rule before the approval policy; returns the (class, loc) pairs
/// the approval policy must then allow.
fn structural<'a>(op: &Op<'a>) -> Result<Vec<(Class, Loc<'a>)>, Refusal> {
    use Class::{Delete, Write};
    match *op {
        Op::Read { at, size } => match at.zone {
            Some(z) => {
                too_big(z, size)?;
                Ok(vec![(Class::Read, at)])
            }
            None => Ok(vec![]),
        },
        Op::WriteContent { at, new_size } => {
            let z = zone_of(at, false)?;
            writable(z, at.path, false)?;
            if let Some(n) = new_size {
                too_big(z, n)?;
            }
            Ok(vec![(Write, at)])
        }
        Op::NewName { at, is_dir } => new_name(at, is_dir),
        Op::Device { at } => new_name(at, false),
        Op::Metadata { at, is_dir } => {
            // A zone dir's own mode, owner, times or xattrs: root-level.
            let z = zone_of(at, true)?;
            writable(z, at.path, is_dir)?;
            Ok(vec![(Write, at)])
        }
        Op::Remove { at, is_dir } => {
            let z = zone_of(at, true)?;
            writable(z, at.path, is_dir)?;
            Ok(vec![(Delete, at)])
        }
        Op::Rename {
            from,
            to,
            is_dir,
            to_is_dir,
            exchange,
        } => {
            let fz = zone_of(from, true)?;
            zone_of(to, true)?;
            if !from.same_zone(&to) {
                return Err(Refusal::CrossZone);
            }
            // Each name changes; each is judged with the real kind of
            // every entry that is or will be there.
            writable(fz, from.path, is_dir)?;
            writable(fz, to.path, is_dir)?;
            if let Some(d) = to_is_dir {
                writable(fz, to.path, d)?;
                if exchange {
                    writable(fz, from.path, d)?;
                }
            }
            let mut needs = vec![(Write, to), (Delete, from)];
            carried(fz, from, to, is_dir, &mut needs)?;
            if let (true, Some(d)) = (exchange, to_is_dir) {
                carried(fz, to, from, d, &mut needs)?;
            }
            suffix(fz, to.path, is_dir)?;
            if exchange {
                suffix(fz, from.path, to_is_dir.unwrap_or(is_dir))?;
                needs.push((Write, from));
            }
            if to_is_dir.is_some() || exchange {
                needs.push((Delete, to));
            }
            Ok(needs)
        }
        Op::Link { from, to } => {
            zone_of(from, true)?;
            let tz = zone_of(to, true)?;
            if !from.same_zone(&to) {
                return Err(Refusal::CrossZone);
            }
            // A new name for a protected file would be a writable way in.
            writable(tz, from.path, false)?;
            writable(tz, to.path, false)?;
            suffix(tz, to.path, false)?;
            let mut needs = vec![(Write, to)];
            carried(tz, from, to, false, &mut needs)?;
            Ok(needs)
        }
        Op::Look { .. } | Op::MayWrite { .. } | Op::Grow { .. } => {
            unasked(op)?;
            Ok(vec![])
        }
    }
}

/// What moving (or linking) the entry at `from`, of kind `is_dir`, to
/// `to` would carry past the zone's path rules. A directory's place can
/// decide what a pattern matches below it (`/docs/final`,
/// `**/secrets/key`, `config/**`): moving one that such a `protect` or
/// `hide` pattern may reach is refused, as is moving a directory to where
/// a `protect` pattern would reach into what it brings. Something read
/// only with approval (`ask_read`) that would be readable unasked at its
/// new name asks to be read first ([`Class::Read`] on `from`, `Ask` at
/// least). What is hidden or protected at `from` itself was refused
/// before; what moves under a `hide` pattern only disappears.
fn carried<'a>(
    z: &ZoneRules,
    from: Loc<'a>,
    to: Loc<'a>,
    is_dir: bool,
    needs: &mut Vec<(Class, Loc<'a>)>,
) -> Result<(), Refusal> {
    if is_dir {
        if z.protected_below(from.path).is_some() || z.protected_below(to.path).is_some() {
            return Err(Refusal::Protected);
        }
        if z.sensitive_below(from.path).is_some() || z.hidden_below(from.path).is_some() {
            return Err(Refusal::SensitiveInside);
        }
    }
    let read_gated = |p: &Path| z.ask_read_of(p, is_dir).is_some();
    let carries_read = (read_gated(from.path) && !read_gated(to.path))
        || (is_dir && z.ask_read_below(from.path).is_some());
    if carries_read {
        needs.push((Class::Read, from));
    }
    Ok(())
}

fn new_name(at: Loc<'_>, is_dir: bool) -> Result<Vec<(Class, Loc<'_>)>, Refusal> {
    let z = zone_of(at, true)?;
    writable(z, at.path, is_dir)?;
    suffix(z, at.path, is_dir)?;
    Ok(vec![(Class::Write, at)])
}

/// The rules for what needs no approval: visibility, the write probe,
/// and the size limit of writes through an approved handle.
fn unasked(op: &Op<'_>) -> Result<(), Refusal> {
    match *op {
        Op::Look { at, is_dir } => match (at.zone, at.path.file_name(), is_dir) {
            (Some(z), Some(name), Some(d)) if !z.visible(name, d) => Err(Refusal::Hidden),
            _ => Ok(()),
        },
        Op::MayWrite { at, is_dir } => writable(zone_of(at, false)?, at.path, is_dir),
        Op::Grow { zone, new_size } => too_big(zone, new_size),
        _ => Ok(()),
    }
}

/// A hidden sensitive root is refused before every other rule: it must
/// look absent, whatever the operation.
fn sensitive(at: Loc<'_>) -> Result<(), Refusal> {
    match at.zone {
        Some(z) if z.is_sensitive(at.path) => Err(Refusal::Sensitive),
        Some(z) if z.hidden_by(at.path).is_some() => Err(Refusal::HiddenByPattern),
        _ => Ok(()),
    }
}

/// The zone of a location that is being changed. `names` marks operations
/// that add, remove, rename or change the entry itself: on a zone dir those
/// are root-level changes.
fn zone_of<'a>(at: Loc<'a>, names: bool) -> Result<&'a ZoneRules, Refusal> {
    match at.zone {
        None => Err(Refusal::RootLevel),
        Some(_) if names && at.path.as_os_str().is_empty() => Err(Refusal::RootLevel),
        Some(z) => Ok(z),
    }
}

fn writable(z: &ZoneRules, path: &Path, is_dir: bool) -> Result<(), Refusal> {
    if z.access == Access::Ro {
        Err(Refusal::ReadOnly)
    } else if z.is_protected(path, is_dir) {
        Err(Refusal::Protected)
    } else {
        Ok(())
    }
}

fn suffix(z: &ZoneRules, path: &Path, is_dir: bool) -> Result<(), Refusal> {
    match path.file_name() {
        Some(name) if !z.visible(name, is_dir) => Err(Refusal::Suffix),
        _ => Ok(()),
    }
}

fn too_big(z: &ZoneRules, size: u64) -> Result<(), Refusal> {
    match z.max_file_bytes {
        Some(max) if size > max => Err(Refusal::TooBig),
        _ => Ok(()),
    }
}

fn by_approval(op: &Op<'_>, needs: &[(Class, Loc<'_>)]) -> Decision {
    // A read a move or link needs (see `carried`) asks at least.
    let moves = matches!(op, Op::Rename { .. } | Op::Link { .. });
    let mut asks = Vec::new();
    for (class, at) in needs {
        let Some(z) = at.zone else { continue };
        let level = match class {
            Class::Read if moves => z.level(Class::Read).max(Approval::Ask),
            _ => z.level_at(*class, at.path),
        };
        match level {
            Approval::PreApproved => {}
            Approval::Blocked => return Decision::Refuse(Refusal::Blocked),
            Approval::Ask => asks.push(AskItem {
                class: *class,
                zone: z.name.clone(),
                path: at.path.to_path_buf(),
            }),
        }
    }
    if asks.is_empty() {
        Decision::Allow
    } else {
        Decision::Ask(asks)
    }
}
