/**
 * What a worker names, for people: the same escaping as the zonemount
 * binary's human views (`text::escape`).
 *
 * Printable text stays as it is; a backslash becomes `\\`; tab, newline
 * and CR become `\t`, `\n`, `\r`; any other C0 control and DEL `\xHH`; a
 * byte that is not UTF-8 `\xHH` (`\x80`-`\xff`); a C1 control, a bidi,
 * zero-width or other invisible format character, a line or paragraph
 * separator, a variation selector, a tag character or another
 * default-ignorable code point, any space but U+0020 (a no-break, em or
 * ideographic space...), a blank (U+2800, the Hangul fillers), a combining
 * overlay (U+0334-U+0338...) or a look-alike of `>` (U+FF1E, U+203A...)
 * `\u{H...}`. The result holds nothing that can redraw a terminal or pass
 * for a column gap, and the escaping is reversible.
 */

/** Code point ranges (inclusive) from U+0080 on shown as `\u{...}`: the
 * C1 controls and what the binary's `text::invisible` and `text::lookalike`
 * hold. `clients/escaped-code-points.txt` in the repository lists every
 * code point the binary escapes, and the tests check this list against it
 * over every code point. */
const ESCAPED: ReadonlyArray<readonly [number, number]> = [
  [0x0080, 0x00a0],
  [0x00ad, 0x00ad],
  [0x02c3, 0x02c3],
  [0x0334, 0x0338],
  [0x034f, 0x034f],
  [0x0600, 0x0605],
  [0x061c, 0x061c],
  [0x06dd, 0x06dd],
  [0x070f, 0x070f],
  [0x0890, 0x0891],
  [0x08e2, 0x08e2],
  [0x115f, 0x1160],
  [0x1433, 0x1433],
  [0x1680, 0x1680],
  [0x17b4, 0x17b5],
  [0x180b, 0x180f],
  [0x2000, 0x200f],
  [0x2028, 0x202f],
  [0x203a, 0x203a],
  [0x205f, 0x206f],
  [0x20d2, 0x20d3],
  [0x20d8, 0x20da],
  [0x20e5, 0x20e6],
  [0x20ea, 0x20eb],
  [0x232a, 0x232a],
  [0x276d, 0x276d],
  [0x276f, 0x276f],
  [0x2771, 0x2771],
  [0x27e9, 0x27e9],
  [0x2800, 0x2800],
  [0x3000, 0x3000],
  [0x3009, 0x3009],
  [0x3164, 0x3164],
  [0xfe00, 0xfe0f],
  [0xfe65, 0xfe65],
  [0xfeff, 0xfeff],
  [0xff1e, 0xff1e],
  [0xffa0, 0xffa0],
  [0xfff0, 0xfffb],
  [0x110bd, 0x110bd],
  [0x110cd, 0x110cd],
  [0x13430, 0x1343f],
  [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a],
  [0xe0000, 0xe0fff],
];

/** Whether code point `cp` (U+0080 or above) is shown as `\u{...}`. */
function escapedCodePoint(cp: number): boolean {
  let lo = 0;
  let hi = ESCAPED.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const r = ESCAPED[mid];
    if (r === undefined) break;
    if (cp < r[0]) hi = mid;
    else if (cp > r[1]) lo = mid + 1;
    else return true;
  }
  return false;
}

/** The length of the valid UTF-8 sequence at `b[i]`, or 0 when the bytes
 * there are not one (overlong forms and surrogates are not). */
function utf8Len(b: Uint8Array, i: number): number {
  const c = b[i] ?? 0;
  const cont = (k: number, lo = 0x80, hi = 0xbf): boolean => {
    const x = b[i + k];
    return x !== undefined && x >= lo && x <= hi;
  };
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c === 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if ((c >= 0xe1 && c <= 0xec) || c === 0xee || c === 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (c === 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (c === 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c === 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

const hex2 = (n: number): string => n.toString(16).padStart(2, "0");

/** `data` (a name's exact bytes, or text) for people. */
export function escape(data: Uint8Array | string): string {
  const b = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  let out = "";
  let i = 0;
  while (i < b.length) {
    const n = utf8Len(b, i);
    if (n === 0) {
      out += `\\x${hex2(b[i] ?? 0)}`;
      i += 1;
      continue;
    }
    const ch = Buffer.from(b.subarray(i, i + n)).toString("utf8");
    const cp = ch.codePointAt(0) ?? 0;
    i += n;
    if (ch === "\\") out += "\\\\";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (cp < 0x20 || cp === 0x7f) out += `\\x${hex2(cp)}`;
    else if (cp >= 0x80 && escapedCodePoint(cp)) out += `\\u{${cp.toString(16)}}`;
    else out += ch;
  }
  return out;
}
