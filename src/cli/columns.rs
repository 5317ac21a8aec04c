//! Aligned text columns: the one table layout of the CLI's human output
//! (`derive`, `status`, `list`, `approvals list`).

/// The columns of a zone table (`derive`, `status`).
pub(crate) const ZONE_HEADER: [&str; 8] = [
    "ZONE",
    "BACKING",
    "MODE",
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
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
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
}
