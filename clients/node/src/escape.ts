/**
 * What a worker names, for people: the same escaping as the zonemount
 * binary's human views.
 *
 * Printable text stays as it is; a backslash becomes `\\`; tab, newline
 * and CR become `\t`, `\n`, `\r`; any other C0 control and DEL `\xHH`; a
 * byte that is not UTF-8 `\xHH` (`\x80`-`\xff`); a C1 control, a bidi,
 * zero-width or other invisible format character, a line or paragraph
 * separator, a variation selector or a tag character `\u{H...}`. The
 * result holds nothing that can redraw a terminal, and the escaping is
 * reversible.
 */

/** Code point ranges (inclusive) shown as `\u{...}` beyond the controls;
 * the same list as the binary's `text::invisible`. */
const INVISIBLE: ReadonlyArray<readonly [number, number]> = [
  [0x00ad, 0x00ad],
  [0x034f, 0x034f],
  [0x0600, 0x0605],
  [0x061c, 0x061c],
  [0x06dd, 0x06dd],
  [0x070f, 0x070f],
  [0x0890, 0x0891],
  [0x08e2, 0x08e2],
  [0x115f, 0x1160],
  [0x180e, 0x180e],
  [0x200b, 0x200f],
  [0x2028, 0x202e],
  [0x2060, 0x2064],
  [0x2066, 0x206f],
  [0x3164, 0x3164],
  [0xfe00, 0xfe0f],
  [0xfeff, 0xfeff],
  [0xffa0, 0xffa0],
  [0xfff9, 0xfffb],
  [0x110bd, 0x110bd],
  [0x110cd, 0x110cd],
  [0x13430, 0x1343f],
  [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a],
  [0xe0000, 0xe007f],
  [0xe0100, 0xe01ef],
];

function invisible(cp: number): boolean {
  return INVISIBLE.some(([lo, hi]) => lo <= cp && cp <= hi);
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
    else if ((cp >= 0x80 && cp <= 0x9f) || invisible(cp)) out += `\\u{${cp.toString(16)}}`;
    else out += ch;
  }
  return out;
}
