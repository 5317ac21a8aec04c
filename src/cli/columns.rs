//! Aligned text columns: the one table layout of the CLI's human output
//! (`derive`, `status`, `list`, `approvals list`), and the zone table
//! `derive` and `status` share.

use crate::control::protocol::ZoneStatus;

/// The columns of a zone table.
const ZONE_HEADER: [&str; 9] = [
    "ZONE",
    "BACKING",
    "MODE",
    "READ",
    "WRITE",
    "DELETE",
    "SUFFIXES",
    "MAX BYTES",
    "PROTECT",
];

/// `rows` as lines: each cell padded to its column's width, two spaces
/// between columns, no trailing blanks.
pub(crate) fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| {
                // Padded by hand: a width format panics past 65,535.
                let pad = w.saturating_sub(c.chars().count());
                format!("{c}{}", " ".repeat(pad))
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The zone table of `derive` and `status`: zone, backing dir, mode,
/// read/write/delete policy, suffixes (as `suffixes` writes the list, or its
/// absence), max bytes, protect.
pub(crate) fn zone_table(
    zones: &[ZoneStatus],
    suffixes: impl Fn(Option<&[String]>) -> String,
) -> String {
    let mut rows = vec![ZONE_HEADER.map(str::to_owned)];
    for z in zones {
        let p = &z.policy;
        rows.push([
            z.name.clone(),
            z.backing.display().to_string(),
            if p.staged {
                format!("{} staged", p.access)
            } else {
                p.access.to_string()
            },
            p.approval.read.to_string(),
            p.approval.write.to_string(),
            p.approval.delete.to_string(),
            suffixes(p.suffixes.as_deref()),
            p.max_file_bytes
                .map_or_else(|| "-".to_owned(), |b| b.to_string()),
            if p.protect.is_empty() {
                "-".to_owned()
            } else {
                p.protect.join(",")
            },
        ]);
    }
    columns(&rows)
}

/// What a zone table's columns leave out, one line per zone and kind:
/// `hide` and `ask_read` patterns, and the sensitive roots hidden in it.
/// Patterns a worker's declaration may add are escaped, as every name a
/// worker chose is in human views.
pub(crate) fn zone_patterns(zones: &[ZoneStatus]) -> String {
    let shown = |v: &[String]| {
        v.iter()
            .map(|p| crate::text::escape_str(p))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    for z in zones {
        let p = &z.policy;
        if !p.hide.is_empty() {
            out.push_str(&format!("hide in {}: {}\n", z.name, shown(&p.hide)));
        }
        if !p.ask_read.is_empty() {
            out.push_str(&format!("ask_read in {}: {}\n", z.name, shown(&p.ask_read)));
        }
        if !p.hidden.is_empty() {
            let names: Vec<String> = p.hidden.iter().map(|h| h.display().to_string()).collect();
            out.push_str(&format!(
                "hidden in {} (sensitive roots): {}\n",
                z.name,
                names.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_align_and_lines_end_clean() {
        let rows = [
            ["A".to_string(), "BB".into(), "C".into()],
            ["aaa".into(), "b".into(), String::new()],
        ];
        assert_eq!(columns(&rows), "A    BB  C\naaa  b\n");
    }

    /// A cell wider than a format width may be (65,535) is padded all the
    /// same: a worker's command line is a cell of `approvals list`.
    #[test]
    fn a_cell_of_any_width_is_padded() {
        let long = "x".repeat(70_000);
        let rows = [[long.clone(), "b".into()], ["a".into(), "c".into()]];
        let out = columns(&rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("{long}  b"));
        assert_eq!(lines[1].len(), 70_003);
        assert!(lines[1].starts_with("a ") && lines[1].ends_with("  c"));
    }
}
