"""``zonemount.escape`` is the binary's: it escapes exactly the code points
``clients/escaped-code-points.txt`` lists (a unit test of the binary's
``src/text.rs`` checks that the table is what the binary escapes), in the
binary's form. Needs no mount."""

from __future__ import annotations

from pathlib import Path

import zonemount

REPO = Path(__file__).resolve().parents[3]
TABLE = REPO / "clients" / "escaped-code-points.txt"


def table() -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for line in TABLE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        lo, _, hi = line.partition("..")
        out.append((int(lo, 16), int(hi or lo, 16)))
    assert out, f"{TABLE} lists nothing"
    return out


def expected(cp: int, escaped: bool) -> str:
    """How the binary shows code point ``cp`` alone."""
    ch = chr(cp)
    if not escaped:
        return ch
    special = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
    if ch in special:
        return special[ch]
    if cp < 0x80:
        return f"\\x{cp:02x}"
    return f"\\u{{{cp:x}}}"


def test_escape_is_the_binarys_over_every_code_point() -> None:
    ranges = table()
    escaped: set[int] = set()
    for lo, hi in ranges:
        escaped.update(range(lo, hi + 1))
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    got = zonemount.escape("".join(map(chr, cps)))
    want = "".join(expected(cp, cp in escaped) for cp in cps)
    if got != want:
        bad = [
            f"U+{cp:04X}: {zonemount.escape(chr(cp))!a}, the binary {expected(cp, cp in escaped)!a}"
            for cp in cps
            if zonemount.escape(chr(cp)) != expected(cp, cp in escaped)
        ]
        raise AssertionError(
            f"escape differs from the binary ({TABLE.name}) at {len(bad)} code points: "
            + "; ".join(bad[:20])
        )


def test_spaces_look_alikes_and_ignorables_are_escaped() -> None:
    for cp in (
        0x00A0, 0x1680, 0x2003, 0x202F, 0x205F, 0x3000, 0x2800, 0x3164,
        0x0336, 0x0338, 0xFF1E, 0x203A, 0x276F, 0x02C3, 0x3009, 0x232A,
        0x17B4, 0x17B5, 0x180B, 0x180D, 0x180F, 0x2065, 0xFFF0, 0xFFF8,
        0xE0080, 0xE00FF, 0xE01F0, 0xE0FFF,
    ):
        assert zonemount.escape(f"a{chr(cp)}b") == f"a\\u{{{cp:x}}}b"
    name = "evil.sh\u00a0\u00a0(0644, 4 bytes)\u00a0\u00a0by git"
    assert zonemount.escape(name) == "evil.sh\\u{a0}\\u{a0}(0644, 4 bytes)\\u{a0}\\u{a0}by git"
    # Ordinary text, dashes among it, stays as it is.
    assert zonemount.escape("Q3 \u2013 report \u2014 d\u00e9j\u00e0 vu \u65e5.md") == (
        "Q3 \u2013 report \u2014 d\u00e9j\u00e0 vu \u65e5.md"
    )
