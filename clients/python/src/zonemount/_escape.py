"""What a worker names, for people: the same escaping as the zonemount
binary's human views (its ``text`` module).

Printable text stays as it is; a backslash becomes ``\\\\``; tab, newline
and CR become ``\\t``, ``\\n``, ``\\r``; any other C0 control and DEL
``\\xHH``; a byte that is not UTF-8 ``\\xHH`` (``\\x80``-``\\xff``); a C1
control, a bidi, zero-width or other invisible format character, a line or
paragraph separator, a variation selector or a tag character
``\\u{H...}``. The result holds nothing that can redraw a terminal, and
the escaping is reversible.
"""

from __future__ import annotations

from typing import Union

#: Code point ranges (inclusive) shown as ``\\u{...}`` beyond the controls;
#: the same list as the binary's ``text::invisible``.
_INVISIBLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE007F),
    (0xE0100, 0xE01EF),
)


def _invisible(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _INVISIBLE)


def _bytes(text: str) -> bytes:
    # A str from os.fsdecode keeps bytes that are not UTF-8 as
    # U+DC80..U+DCFF: give them back.
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def escape(data: Union[bytes, str]) -> str:
    """``data`` (a name's exact bytes, or text) for people."""
    raw = _bytes(data) if isinstance(data, str) else data
    out = []
    # surrogateescape turns each byte that is not part of valid UTF-8 into
    # U+DC80..U+DCFF, one per byte, as the binary escapes them.
    for ch in raw.decode("utf-8", "surrogateescape"):
        cp = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif 0xDC80 <= cp <= 0xDCFF:
            out.append(f"\\x{cp - 0xDC00:02x}")
        elif 0x80 <= cp <= 0x9F or _invisible(cp):
            out.append(f"\\u{{{cp:x}}}")
        else:
            out.append(ch)
    return "".join(out)
