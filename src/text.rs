//! What a worker names — file names, paths, command lines — on its way to
//! a person or a program.
//!
//! A worker chooses these bytes, so a terminal must never get them raw: a
//! name holding ESC, CR or a bidi override can redraw the supervisor's
//! screen (show a request for `evil.sh` as `notes.md`, erase a line of a
//! review), and one holding a no-break space or a look-alike of `>` can
//! imitate the columns and arrows a view draws around it. [`escape`] is
//! the one escaper every human view uses: it keeps printable text as it
//! is and writes everything else as an escape, so the output holds no
//! control, bidi, invisible, blank or look-alike character of those
//! below, and [`unescape`] gives the exact bytes back:
//!
//! - `\\` for a backslash (so every escape is unambiguous),
//! - `\t`, `\n`, `\r` for tab, newline and carriage return,
//! - `\xHH` (two lowercase hex digits) for any other C0 control and DEL,
//!   and for each byte that is not part of valid UTF-8 (`\x80`–`\xff`);
//! - `\u{H…}` for a C1 control, a character in [`invisible`] (bidi
//!   overrides, embeddings, isolates and marks, zero-width and other
//!   format characters, line and paragraph separators, tag characters)
//!   or one in [`lookalike`] (every space but U+0020, blanks, combining
//!   overlays, look-alikes of `>`).
//!
//! Paths and command lines ([`path`], [`cmdline`]) are shown between
//! columns and arrows, so they escape two characters more, by where they
//! stand: a second space in a row is written `\x20` (views part a path
//! from its details by two spaces), and a `>` right after a `-` or after
//! any character that is not ASCII (a dash, minus or hyphen look-alike,
//! a combining mark on a `-`) is written `\x3e` (views write a rename as
//! `FROM -> TO`). Every look-alike of `>` being escaped everywhere, no
//! name can draw that arrow or those two spaces.
//!
//! The code points [`escape`] writes as an escape are listed, as ranges,
//! in `clients/escaped-code-points.txt`; a unit test here, and the Python
//! and TypeScript clients' tests of their own `escape`, check against it.
//!
//! JSON keeps the bytes exact instead ([`for_json`]): a JSON string is the
//! text itself when it is valid UTF-8; when it is not, the string holds it
//! with U+FFFD in place of each invalid sequence and a sibling field
//! `<field>_b64` holds the exact bytes (standard base64).

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

/// Characters that change how text around them is shown, or show as
/// nothing: never written raw to a terminal. Beyond the controls (C0,
/// DEL, C1):
/// - bidi: U+061C ALM, U+200E LRM, U+200F RLM, U+202A–U+202E embeddings
///   and overrides, U+2066–U+2069 isolates;
/// - zero width and joiners: U+200B–U+200D, U+2060–U+2064, U+FEFF, U+034F;
/// - other format characters: U+00AD, U+0600–U+0605, U+06DD, U+070F,
///   U+0890–U+0891, U+08E2, U+180E, U+206A–U+206F, U+FFF9–U+FFFB, U+110BD,
///   U+110CD, U+13430–U+1343F, U+1BCA0–U+1BCA3, U+1D173–U+1D17A;
/// - blank fillers: U+115F, U+1160, U+3164, U+FFA0, and the Khmer
///   inherent vowels U+17B4, U+17B5;
/// - variation selectors U+180B–U+180D, U+180F, U+FE00–U+FE0F,
///   U+E0100–U+E01EF, and the tag characters U+E0000–U+E007F (text an LLM
///   reads and a person doesn't);
/// - what Unicode keeps as default-ignorable for later use (shown as
///   nothing where it is not known): U+2065, U+FFF0–U+FFF8, and the rest
///   of U+E0000–U+E0FFF;
/// - U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR.
///
/// With the controls, these hold every default-ignorable code point.
pub fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Characters a name could use to pass for what a view draws around it:
/// never written raw to a terminal either.
/// - every space but U+0020 (what Unicode calls White_Space or a space
///   separator, Zs, beyond the controls and the line and paragraph
///   separators): U+00A0, U+1680, U+2000–U+200A, U+202F, U+205F, U+3000
///   (two of them read as the two spaces that part a path from its
///   details, or as a column gap);
/// - blanks: U+2800 BRAILLE PATTERN BLANK (the Hangul fillers U+115F,
///   U+1160, U+3164 and U+FFA0 are [`invisible`]);
/// - combining overlays, which strike through, slash or ring the
///   character before them and so fake punctuation: U+0334–U+0338,
///   U+20D2–U+20D3, U+20D8–U+20DA, U+20E5–U+20E6, U+20EA–U+20EB;
/// - look-alikes of `>`: U+02C3, U+1433, U+203A, U+232A, U+276D, U+276F,
///   U+2771, U+27E9, U+3009, U+FE65, U+FF1E (with one after a dash a
///   name would draw a rename's arrow; [`path`] escapes an ASCII `>` in
///   that place).
pub fn lookalike(c: char) -> bool {
    matches!(
        c,
        '\u{00A0}'
            | '\u{02C3}'
            | '\u{0334}'..='\u{0338}'
            | '\u{1433}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{202F}'
            | '\u{203A}'
            | '\u{205F}'
            | '\u{20D2}'..='\u{20D3}'
            | '\u{20D8}'..='\u{20DA}'
            | '\u{20E5}'..='\u{20E6}'
            | '\u{20EA}'..='\u{20EB}'
            | '\u{232A}'
            | '\u{276D}'
            | '\u{276F}'
            | '\u{2771}'
            | '\u{27E9}'
            | '\u{2800}'
            | '\u{3000}'
            | '\u{3009}'
            | '\u{FE65}'
            | '\u{FF1E}'
    )
}

/// Whether `c` is escaped by [`escape`] (a backslash aside): a control
/// (C0, DEL, C1), an [`invisible`] character or a [`lookalike`].
pub fn unsafe_for_terminal(c: char) -> bool {
    c.is_control() || invisible(c) || lookalike(c)
}

/// `bytes` for people: printable text as it is, the rest escaped (see
/// the module header). Reversible with [`unescape`].
pub fn escape(bytes: &[u8]) -> String {
    escape_keeping(bytes, &[])
}

/// [`escape`] of a path, with a `>` right after a `-` or after a
/// character that is not ASCII written `\x3e` (so `->` is `-\x3e`): views
/// show a rename or link as `FROM -> TO`, and a name holding ` -> ` (`mv a
/// "b -> c"`), or a dash, minus or hyphen look-alike before a `>`
/// (`b \u{2212}> c`), would read as another pair. Two spaces in a row are
/// written ` \x20`: views part a path from what follows by two spaces (`A
/// /w/x  (0644, 4 bytes)  by git`), which a name could imitate (every
/// other space is escaped by [`escape`] already). Reversible with
/// [`unescape`].
pub fn path(p: &Path) -> String {
    path_bytes(p.as_os_str().as_bytes())
}

/// [`path`] of a path's bytes.
pub fn path_bytes(bytes: &[u8]) -> String {
    let escaped = escape(bytes);
    let mut out = String::with_capacity(escaped.len());
    // The last character written: an escape's own characters are ASCII.
    let mut prev = None;
    for c in escaped.chars() {
        match (prev, c) {
            (Some(' '), ' ') => out.push_str("\\x20"),
            (Some(p), '>') if p == '-' || !p.is_ascii() => out.push_str("\\x3e"),
            _ => out.push(c),
        }
        prev = out.chars().next_back();
    }
    out
}

/// A process's command line (its argv joined by spaces, or its name) for
/// people: escaped as [`path`] escapes a path. It is shown in the same
/// columns and after the same two spaces (`approvals list`'s COMMAND,
/// `changes`' `by ...`), and a worker chooses it (`exec -a "vim  ID  x"`).
/// A text file a worker has a hand in (`/proc/PID/stat`, `status` and
/// `comm` hold a command name a process may set to any bytes), read with
/// what is not UTF-8 replaced: such a name must never make the process
/// look gone, or its file unreadable, to a check. None when it can't be
/// read at all.
pub fn read_lossy(path: impl AsRef<std::path::Path>) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

pub fn cmdline(bytes: &[u8]) -> String {
    path_bytes(bytes)
}

/// [`escape`] of text already in a `str`.
pub fn escape_str(s: &str) -> String {
    escape(s.as_bytes())
}

/// [`escape`], except that the characters in `keep` (among tab, newline
/// and backslash) stay as they are: for many lines of a worker's text,
/// such as a diff, where a newline ends a line, a tab is content and a
/// backslash common (keeping a backslash makes the text safe to show but
/// no longer reversible: not for names).
pub fn escape_keeping(bytes: &[u8], keep: &[char]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                c if keep.contains(&c) && matches!(c, '\t' | '\n' | '\\') => out.push(c),
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 || c == '\x7f' => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if unsafe_for_terminal(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// One of our own messages that may quote a worker's name raw (an error
/// from the backing store naming a path): [`escape_keeping`] tab, newline
/// and backslash, so nothing in it draws on a terminal and names already
/// escaped are not escaped twice.
pub fn message(s: &str) -> String {
    escape_keeping(s.as_bytes(), &['\t', '\n', '\\'])
}

/// Why a text is not something [`escape`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an escaped name at byte {at}: {why}")]
pub struct UnescapeError {
    pub at: usize,
    pub why: &'static str,
}

/// The bytes [`escape`] was given.
pub fn unescape(s: &str) -> Result<Vec<u8>, UnescapeError> {
    let mut out = Vec::with_capacity(s.len());
    let mut it = s.char_indices();
    let err = |at, why| UnescapeError { at, why };
    while let Some((at, c)) = it.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match it.next().map(|(_, c)| c) {
            Some('\\') => out.push(b'\\'),
            Some('t') => out.push(b'\t'),
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('x') => {
                let hex: String = (0..2).filter_map(|_| it.next().map(|(_, c)| c)).collect();
                let b = (hex.len() == 2 && hex.chars().all(|h| h.is_ascii_hexdigit()))
                    .then(|| u8::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or(err(at, "\\x needs two hex digits"))?;
                out.push(b);
            }
            Some('u') => {
                if it.next().map(|(_, c)| c) != Some('{') {
                    return Err(err(at, "\\u needs {"));
                }
                let mut hex = String::new();
                loop {
                    match it.next().map(|(_, c)| c) {
                        Some('}') => break,
                        Some(h) if h.is_ascii_hexdigit() && hex.len() < 6 => hex.push(h),
                        _ => return Err(err(at, "\\u{...} needs up to six hex digits and }")),
                    }
                }
                let c = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or(err(at, "\\u{...} is not a character"))?;
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => return Err(err(at, "unknown escape")),
        }
    }
    Ok(out)
}

/// `bytes` for JSON: the text, and the exact bytes in base64 when the text
/// had to replace something (invalid UTF-8).
pub fn for_json(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(B64.encode(bytes)),
        ),
    }
}

/// [`for_json`] of a path.
pub fn path_for_json(p: &Path) -> (String, Option<String>) {
    for_json(p.as_os_str().as_bytes())
}

/// The exact bytes of a JSON field: its `_b64` sibling when there is one
/// (and it decodes), else the text.
pub fn from_json(text: &str, b64: Option<&str>) -> Vec<u8> {
    b64.and_then(|b| B64.decode(b).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec())
}

/// A JSON field (and its `_b64` sibling) for people: [`escape`] of its
/// exact bytes.
pub fn shown(text: &str, b64: Option<&str>) -> String {
    escape(&from_json(text, b64))
}

/// [`shown`] of a path: as [`path`] writes it.
pub fn shown_path(text: &str, b64: Option<&str>) -> String {
    path_bytes(&from_json(text, b64))
}

/// [`shown`] of a command line: as [`cmdline`] writes it.
pub fn shown_cmdline(text: &str, b64: Option<&str>) -> String {
    cmdline(&from_json(text, b64))
}

/// The exact bytes of a JSON field as a path.
pub fn path_from_json(text: &str, b64: Option<&str>) -> std::path::PathBuf {
    OsStr::from_bytes(&from_json(text, b64)).into()
}

/// JSON whose strings are exact and whose bytes are safe on a terminal:
/// serde_json escapes C0 controls, this also escapes DEL, C1 controls and
/// the [`invisible`] characters as `\uXXXX` (a JSON parser reads them
/// back unchanged). For `--json` output and the ledger, which people do
/// read with `cat`.
struct Safe<F>(F);

macro_rules! delegate {
    ($($name:ident),*) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
            self.0.$name(w)
        }
    )*};
}

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for Safe<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if unsafe_for_terminal(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(w, "\\u{u:04x}")?;
                }
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }

    delegate!(
        begin_array,
        end_array,
        end_array_value,
        begin_object,
        end_object,
        end_object_key,
        begin_object_value,
        end_object_value
    );
}

fn safe_json<T: serde::Serialize + ?Sized, F: serde_json::ser::Formatter>(
    v: &T,
    f: F,
) -> serde_json::Result<String> {
    let mut out = Vec::new();
    v.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        Safe(f),
    ))?;
    // Only whole UTF-8 strings and ASCII were written.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
}

/// `v` as one line of JSON, exact and safe on a terminal (see [`Safe`]).
pub fn json_line<T: serde::Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    safe_json(v, serde_json::ser::CompactFormatter)
}

/// `v` as pretty JSON, exact and safe on a terminal.
pub fn json_pretty<T: serde::Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    safe_json(v, serde_json::ser::PrettyFormatter::new())
}

/// Serde's `serialize_with` for a path in a derived JSON form: its text
/// (U+FFFD in place of bytes that are not UTF-8, where serde would fail);
/// where the exact bytes matter, the form adds a `_b64` sibling (as
/// `stage::report` does).
pub fn serialize_lossy<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A name holding ` -> ` can't pass for a rename's or link's arrow
    /// (found by an attack pass: `mv e3 "evil -> e1"` was listed as
    /// `/w/e3 -> /w/evil -> e1`), and the name comes back exact.
    #[test]
    fn an_arrow_in_a_path_is_escaped_and_comes_back() {
        let shown = path(Path::new("/w/evil -> e1"));
        assert_eq!(shown, "/w/evil -\\x3e e1");
        assert_eq!(unescape(&shown).unwrap(), b"/w/evil -> e1");
        assert_eq!(shown_path("/w/l -> x", None), "/w/l -\\x3e x");
        assert_eq!(path(Path::new("/w/a->b>c-")), "/w/a-\\x3eb>c-");
    }

    #[test]
    fn two_spaces_in_a_path_are_escaped_and_come_back() {
        let name = "/w/x  (0644, 4 bytes)  by git";
        let shown = path(Path::new(name));
        assert_eq!(shown, "/w/x \\x20(0644, 4 bytes) \\x20by git");
        assert!(!shown.contains("  "));
        assert_eq!(unescape(&shown).unwrap(), name.as_bytes());
        for n in ["a   b", "a    b", " ", "  ", "a b c"] {
            let shown = path(Path::new(n));
            assert!(!shown.contains("  "), "{shown:?}");
            assert_eq!(unescape(&shown).unwrap(), n.as_bytes(), "{shown:?}");
        }
    }

    /// Every space but U+0020 (Unicode's White_Space, which holds every
    /// space separator, Zs), and the blanks, are escaped wherever they
    /// stand, and come back: two no-break spaces are not the two spaces
    /// that part a path from its details, nor a column gap.
    #[test]
    fn every_other_space_and_blank_is_escaped_and_comes_back() {
        let mut spaces = 0;
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            if !(c.is_whitespace() && c != ' ') {
                continue;
            }
            spaces += 1;
            let s = format!("a{c}{c}b");
            let shown = escape_str(&s);
            assert!(!shown.contains(c), "{:x}: {shown:?}", c as u32);
            assert_eq!(unescape(&shown).unwrap(), s.as_bytes());
        }
        assert!(spaces >= 24, "{spaces}");
        for c in [
            '\u{a0}', '\u{1680}', '\u{2000}', '\u{2003}', '\u{200a}', '\u{202f}', '\u{205f}',
            '\u{3000}', '\u{2800}', '\u{3164}', '\u{115f}', '\u{1160}', '\u{ffa0}',
        ] {
            assert_eq!(
                escape_str(&format!("x{c}y")),
                format!("x\\u{{{:x}}}y", c as u32)
            );
        }
        // A name that imitates the details of a line of `changes`, and
        // one that imitates the PID, UID and COMMAND columns of
        // `approvals list`.
        let details = format!(
            "/w/evil.sh\u{a0}\u{a0}(0644, 4 bytes)\u{a0}\u{a0}by git{}",
            "\u{2003}".repeat(5)
        );
        let columns = format!(
            "/ask/notes.md{}99999\u{2003}\u{2003}0\u{3000}\u{3000}git commit",
            "\u{a0}".repeat(16)
        );
        for name in [details, columns] {
            let shown = path(Path::new(&name));
            assert!(
                !shown.chars().any(|c| c.is_whitespace() && c != ' '),
                "{shown:?}"
            );
            assert!(!shown.contains("  "), "{shown:?}");
            assert_eq!(unescape(&shown).unwrap(), name.as_bytes());
        }
        assert_eq!(
            path(Path::new("/w/x\u{a0}\u{a0}(0644)")),
            "/w/x\\u{a0}\\u{a0}(0644)"
        );
    }

    /// A combining overlay strikes through, slashes or rings the
    /// character before it (`-` with U+0338 is drawn like a `/`, `=` like
    /// `≠`): escaped wherever it stands.
    #[test]
    fn combining_overlays_are_escaped_and_come_back() {
        for cp in (0x334..=0x338)
            .chain(0x20d2..=0x20d3)
            .chain(0x20d8..=0x20da)
            .chain(0x20e5..=0x20e6)
            .chain(0x20ea..=0x20eb)
        {
            let c = char::from_u32(cp).unwrap();
            let s = format!("a-{c}>b");
            let shown = escape_str(&s);
            assert_eq!(shown, format!("a-\\u{{{cp:x}}}>b"));
            assert_eq!(unescape(&shown).unwrap(), s.as_bytes());
            assert_eq!(path(Path::new(&s)), format!("a-\\u{{{cp:x}}}>b"));
        }
    }

    /// No name draws a rename's arrow from look-alikes: a look-alike of
    /// `>` is escaped wherever it stands, and in a path (or a command
    /// line) a `>` after a `-`, a dash, minus or hyphen look-alike, or any
    /// other character that is not ASCII is `\x3e`. Each comes back.
    #[test]
    fn arrow_lookalikes_in_a_path_are_escaped_and_come_back() {
        const DASHES: &[char] = &[
            '-', '\u{2010}', '\u{2011}', '\u{2012}', '\u{2013}', '\u{2014}', '\u{2015}',
            '\u{2043}', '\u{2212}', '\u{fe58}', '\u{fe63}', '\u{ff0d}', '\u{2500}', '\u{30fc}',
            '\u{4e00}',
        ];
        const GTS: &[char] = &[
            '\u{2c3}', '\u{1433}', '\u{203a}', '\u{232a}', '\u{276d}', '\u{276f}', '\u{2771}',
            '\u{27e9}', '\u{3009}', '\u{fe65}', '\u{ff1e}',
        ];
        for &g in GTS {
            assert!(lookalike(g));
            assert_eq!(
                escape_str(&format!("a{g}b")),
                format!("a\\u{{{:x}}}b", g as u32)
            );
        }
        for &d in DASHES {
            for g in std::iter::once('>').chain(GTS.iter().copied()) {
                for between in ["", "\u{301}", "\u{338}"] {
                    let name = format!("/w/evil {d}{between}{g} /w/e1");
                    for shown in [path(Path::new(&name)), cmdline(name.as_bytes())] {
                        let cs: Vec<char> = shown.chars().collect();
                        for w in cs.windows(2) {
                            assert!(
                                !(w[1] == '>' && (w[0] == '-' || !w[0].is_ascii())),
                                "{shown:?}"
                            );
                        }
                        assert!(!cs.iter().any(|&c| GTS.contains(&c)), "{shown:?}");
                        assert_eq!(unescape(&shown).unwrap(), name.as_bytes(), "{shown:?}");
                    }
                }
            }
        }
        assert_eq!(path(Path::new("/w/b \u{2212}> c")), "/w/b \u{2212}\\x3e c");
        assert_eq!(path(Path::new("/w/b \u{2010}> c")), "/w/b \u{2010}\\x3e c");
        assert_eq!(path(Path::new("/w/b \u{ff0d}> c")), "/w/b \u{ff0d}\\x3e c");
        assert_eq!(path(Path::new("/w/b -\u{ff1e} c")), "/w/b -\\u{ff1e} c");
        // A `>` after anything else ASCII stays as it is.
        assert_eq!(path(Path::new("/w/2>&1 a>b")), "/w/2>&1 a>b");
    }

    /// A command line is shown as a path is: `exec -a "vim  ID  fake"`
    /// can't imitate the columns after it, nor draw an arrow.
    #[test]
    fn a_command_line_escapes_two_spaces_and_arrows_and_comes_back() {
        let argv = "vim  ID  fake\u{a0}\u{a0}x -> y";
        let shown = cmdline(argv.as_bytes());
        assert_eq!(shown, "vim \\x20ID \\x20fake\\u{a0}\\u{a0}x -\\x3e y");
        assert_eq!(unescape(&shown).unwrap(), argv.as_bytes());
        assert_eq!(shown_cmdline("a  b", None), "a \\x20b");
        assert_eq!(
            cmdline(b"sh -c echo hi > final/x.md"),
            "sh -c echo hi > final/x.md"
        );
    }

    /// The ranges of code points [`escape`] writes as an escape, as
    /// `clients/escaped-code-points.txt` lists them.
    fn escaped_ranges() -> Vec<(u32, u32)> {
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let s = c.to_string();
            if escape_str(&s) == s {
                continue;
            }
            let cp = c as u32;
            match ranges.last_mut() {
                Some((_, hi)) if *hi + 1 == cp => *hi = cp,
                _ => ranges.push((cp, cp)),
            }
        }
        ranges
    }

    const ESCAPED_TABLE: &str = "clients/escaped-code-points.txt";

    /// The table the clients' tests check their `escape` against is the
    /// binary's: a change to what [`escape`] escapes fails here until the
    /// table (and so each client, whose tests then fail) follows it.
    /// `ZONEMOUNT_WRITE_ESCAPED=1` writes the table anew.
    #[test]
    fn the_clients_table_of_escaped_code_points_is_the_binarys() {
        let ranges = escaped_ranges();
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(ESCAPED_TABLE);
        if std::env::var_os("ZONEMOUNT_WRITE_ESCAPED").is_some() {
            let mut text = String::from(
                "# The code points zonemount's human views write as an escape (src/text.rs:\n\
                 # `escape`): `\\\\`, `\\t`, `\\n`, `\\r`, `\\xHH` below U+0080, `\\u{H...}`\n\
                 # above. One range a line, inclusive, in hex. The Python and TypeScript\n\
                 # clients' tests check their own `escape` against it over every code\n\
                 # point; a unit test of src/text.rs checks that it is the binary's\n\
                 # (ZONEMOUNT_WRITE_ESCAPED=1 cargo test --lib text:: writes it anew).\n",
            );
            for (lo, hi) in &ranges {
                if lo == hi {
                    let _ = writeln!(text, "{lo:04X}");
                } else {
                    let _ = writeln!(text, "{lo:04X}..{hi:04X}");
                }
            }
            std::fs::write(&file, text).unwrap();
        }
        let listed: Vec<(u32, u32)> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (lo, hi) = l.split_once("..").unwrap_or((l, l));
                (
                    u32::from_str_radix(lo, 16).unwrap(),
                    u32::from_str_radix(hi, 16).unwrap(),
                )
            })
            .collect();
        assert!(
            listed == ranges,
            "{ESCAPED_TABLE} is not what text::escape escapes: write it anew with \
             ZONEMOUNT_WRITE_ESCAPED=1 cargo test --lib text::, then bring the Python \
             (_escape.py) and TypeScript (escape.ts) clients in line"
        );
        // What the clients assume of the form: `\\u{...}` above ASCII.
        for (lo, hi) in ranges.iter().filter(|(lo, _)| *lo >= 0x80) {
            for c in (*lo..=*hi).filter_map(char::from_u32) {
                assert_eq!(escape_str(&c.to_string()), format!("\\u{{{:x}}}", c as u32));
            }
        }
    }

    #[test]
    fn printable_text_is_kept() {
        for s in [
            "notes.md",
            "ü/日本語 file (1).txt",
            "a'b\"c",
            "emoji 😀",
            " ",
        ] {
            assert_eq!(escape_str(s), s);
        }
    }

    #[test]
    fn what_draws_on_a_terminal_is_escaped() {
        assert_eq!(escape_str("a\x1b[2Kb"), "a\\x1b[2Kb");
        assert_eq!(escape_str("x\ry\nz\tw"), "x\\ry\\nz\\tw");
        assert_eq!(escape_str("\0\x07\x7f"), "\\x00\\x07\\x7f");
        assert_eq!(escape_str("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(escape_str("evil\u{202e}hs.md"), "evil\\u{202e}hs.md");
        assert_eq!(
            escape_str("\u{2066}\u{200f}\u{feff}"),
            "\\u{2066}\\u{200f}\\u{feff}"
        );
        assert_eq!(escape_str("tag\u{e0041}"), "tag\\u{e0041}");
        // Every default-ignorable code point (Unicode's
        // DerivedCoreProperties.txt) that the list once missed.
        for c in [
            '\u{17b4}',
            '\u{17b5}',
            '\u{180b}',
            '\u{180f}',
            '\u{2065}',
            '\u{fff0}',
            '\u{fff8}',
            '\u{e0fff}',
        ] {
            assert_eq!(
                escape_str(&format!("run.sh{c}")),
                format!("run.sh\\u{{{:x}}}", c as u32)
            );
        }
        assert_eq!(escape(b"bad\xff\xc3"), "bad\\xff\\xc3");
        assert_eq!(
            escape_str("a\\x1b"),
            "a\\\\x1b",
            "a literal backslash is escaped"
        );
    }

    #[test]
    fn newline_and_tab_may_be_kept_for_many_lines() {
        assert_eq!(
            escape_keeping(b"+a\tb\x1b[1A\r\n", &['\t', '\n']),
            "+a\tb\\x1b[1A\\r\n"
        );
        assert_eq!(
            escape_keeping(b"\x1b", &['\x1b']),
            "\\x1b",
            "only tab, newline, \\"
        );
        assert_eq!(escape_keeping(b"\"\\n\"\x1b", &['\\']), "\"\\n\"\\x1b");
    }

    #[test]
    fn bad_escapes_are_refused() {
        for s in [
            "\\",
            "\\q",
            "\\x1",
            "\\xzz",
            "\\x+1",
            "\\u{",
            "\\u{}",
            "\\u{110000}",
            "\\u{d800}",
            "\\u1",
        ] {
            assert!(unescape(s).is_err(), "{s}");
        }
    }

    #[test]
    fn json_keeps_the_exact_bytes() {
        assert_eq!(for_json(b"a\x1bb"), ("a\x1bb".into(), None));
        let (text, b64) = for_json(b"a\xffb");
        assert_eq!(text, "a\u{fffd}b");
        assert_eq!(b64.as_deref(), Some("Yf9i"));
        assert_eq!(from_json(&text, b64.as_deref()), b"a\xffb");
        assert_eq!(shown(&text, b64.as_deref()), "a\\xffb");
        assert_eq!(shown("a\u{202e}", None), "a\\u{202e}");
    }

    #[test]
    fn json_is_exact_and_safe_on_a_terminal() {
        let names = [
            "a\x1b[2K\rb",
            "del\x7f c1\u{9b} rlo\u{202e} tag\u{e0041} é 日 😀",
            "plain",
        ];
        let v = serde_json::json!({"names": names, "k\u{2066}": 1});
        for text in [json_line(&v).unwrap(), json_pretty(&v).unwrap()] {
            assert!(
                !text.chars().any(|c| unsafe_for_terminal(c) && c != '\n'),
                "{text:?}"
            );
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, v, "{text}");
        }
        assert_eq!(
            json_line(&"\u{202e}\u{e0041}\x7f").unwrap(),
            "\"\\u202e\\udb40\\udc41\\u007f\""
        );
        assert_eq!(
            json_pretty(&serde_json::json!({"a": [1]})).unwrap(),
            serde_json::to_string_pretty(&serde_json::json!({"a": [1]})).unwrap()
        );
    }

    /// Bytes biased towards what matters here: controls, bidi, stray
    /// UTF-8 lead and continuation bytes, backslashes and escape-like text.
    fn random_bytes(rng: &mut fastrand::Rng) -> Vec<u8> {
        const PIECES: &[&str] = &[
            "\\",
            "\\x1b",
            "\\u{202e}",
            "x",
            "é",
            "日",
            "😀",
            "\u{202e}",
            "\u{2066}",
            "\u{200f}",
            "\u{9b}",
            "\u{85}",
            "\u{feff}",
            "\u{e0041}",
            "\u{2028}",
            "{",
            "}",
            "u",
        ];
        let n = rng.usize(0..24);
        let mut out = Vec::new();
        for _ in 0..n {
            match rng.u8(0..4) {
                0 => out.push(rng.u8(..)),
                1 => out.push(rng.u8(0..0x20)),
                2 => out.push(rng.u8(0x80..=0xff)),
                _ => out.extend_from_slice(PIECES[rng.usize(..PIECES.len())].as_bytes()),
            }
        }
        out
    }

    #[test]
    fn property_no_unsafe_char_out_and_the_bytes_back() {
        let mut rng = fastrand::Rng::with_seed(27);
        for _ in 0..50_000 {
            let input = random_bytes(&mut rng);
            let out = escape(&input);
            if let Some(c) = out.chars().find(|&c| unsafe_for_terminal(c)) {
                panic!("{c:?} raw in {out:?} (from {input:?})");
            }
            assert_eq!(unescape(&out).as_deref(), Ok(&input[..]), "{out:?}");
            let kept = escape_keeping(&input, &['\t', '\n']);
            assert!(
                !kept
                    .chars()
                    .any(|c| unsafe_for_terminal(c) && c != '\t' && c != '\n'),
                "{kept:?}"
            );
        }
    }

    #[test]
    fn property_every_char_is_safe_or_escaped() {
        for cp in 0..=0x10FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let mut buf = [0; 4];
            let bytes = c.encode_utf8(&mut buf).as_bytes();
            let out = escape(bytes);
            assert!(!out.chars().any(unsafe_for_terminal), "{cp:x}");
            assert_eq!(unescape(&out).as_deref(), Ok(bytes), "{cp:x}");
        }
    }
}
