//! What a worker names — file names, paths, command lines — on its way to
//! a person or a program.
//!
//! A worker chooses these bytes, so a terminal must never get them raw: a
//! name holding ESC, CR or a bidi override can redraw the supervisor's
//! screen (show a request for `evil.sh` as `notes.md`, erase a line of a
//! review). [`escape`] is the one escaper every human view uses: it keeps
//! printable text as it is and writes everything else as an escape, so the
//! output holds no control, bidi or invisible format character and
//! [`unescape`] gives the exact bytes back:
//!
//! - `\\` for a backslash (so every escape is unambiguous),
//! - `\t`, `\n`, `\r` for tab, newline and carriage return,
//! - `\xHH` (two lowercase hex digits) for any other C0 control and DEL,
//!   and for each byte that is not part of valid UTF-8 (`\x80`–`\xff`);
//! - `\u{H…}` for a C1 control or a character in [`invisible`] (bidi
//!   overrides, embeddings, isolates and marks, zero-width and other
//!   format characters, line and paragraph separators, tag characters).
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

/// Whether `c` is escaped by [`escape`] (a backslash aside): a control
/// (C0, DEL, C1) or an [`invisible`] character.
pub fn unsafe_for_terminal(c: char) -> bool {
    c.is_control() || invisible(c)
}

/// `bytes` for people: printable text as it is, the rest escaped (see
/// the module header). Reversible with [`unescape`].
pub fn escape(bytes: &[u8]) -> String {
    escape_keeping(bytes, &[])
}

/// [`escape`] of a path, with a `->` in it written `-\x3e`: views show a
/// rename or link as `FROM -> TO`, and a name holding ` -> ` (`mv a
/// "b -> c"`) would read as another pair. Two spaces in a row are written
/// ` \x20`: views part a path from what follows by two spaces (`A
/// /w/x  (0644, 4 bytes)  by git`), which a name could imitate. Reversible
/// with [`unescape`].
pub fn path(p: &Path) -> String {
    path_bytes(p.as_os_str().as_bytes())
}

/// [`path`] of a path's bytes.
pub fn path_bytes(bytes: &[u8]) -> String {
    escape(bytes)
        .replace("->", "-\\x3e")
        .replace("  ", " \\x20")
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
