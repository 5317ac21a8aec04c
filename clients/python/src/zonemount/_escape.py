"""What a worker names, for people: the same escaping as the zonemount
binary's human views (its ``text`` module, ``text::escape``).

Printable text stays as it is; a backslash becomes ``\\\\``; tab, newline
and CR become ``\\t``, ``\\n``, ``\\r``; any other C0 control and DEL
``\\xHH``; a byte that is not UTF-8 ``\\xHH`` (``\\x80``-``\\xff``); a C1
control, a bidi, zero-width or other invisible format character, a line or
paragraph separator, a variation selector, a tag character or another
default-ignorable code point, any space but U+0020 (a no-break, em or
ideographic space...), a blank (U+2800, the Hangul fillers), a combining
overlay (U+0334-U+0338...) or a look-alike of ``>`` (U+FF1E, U+203A...)
``\\u{H...}``. The result holds nothing that can redraw a terminal or pass
for a column gap, and the escaping is reversible.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Union

#: Code point ranges (inclusive) from U+0080 on shown as ``\\u{...}``: the
#: C1 controls and what the binary's ``text::invisible`` and
#: ``text::lookalike`` hold. ``clients/escaped-code-points.txt`` in the
#: repository lists every code point the binary escapes, and the tests
#: check this list against it over every code point.
_ESCAPED = (
    (0x0080, 0x00A0),
    (0x00AD, 0x00AD),
    (0x02C3, 0x02C3),
    (0x0334, 0x0338),
    (0x034F, 0x034F),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x1433, 0x1433),
    (0x1680, 0x1680),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x203A, 0x203A),
    (0x205F, 0x206F),
    (0x20D2, 0x20D3),
    (0x20D8, 0x20DA),
    (0x20E5, 0x20E6),
    (0x20EA, 0x20EB),
    (0x232A, 0x232A),
    (0x276D, 0x276D),
    (0x276F, 0x276F),
    (0x2771, 0x2771),
    (0x27E9, 0x27E9),
    (0x2800, 0x2800),
    (0x3000, 0x3000),
    (0x3009, 0x3009),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFE65, 0xFE65),
    (0xFEFF, 0xFEFF),
    (0xFF1E, 0xFF1E),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_STARTS = tuple(lo for lo, _ in _ESCAPED)


def _escaped(cp: int) -> bool:
    i = bisect_right(_STARTS, cp) - 1
    return i >= 0 and cp <= _ESCAPED[i][1]


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
        elif cp >= 0x80 and _escaped(cp):
            out.append(f"\\u{{{cp:x}}}")
        else:
            out.append(ch)
    return "".join(out)
