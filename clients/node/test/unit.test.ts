// What needs no mount: escaping, exact names, the registry's key, the
// checks on what the daemon sends.

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import * as zm from "../src/index.js";
import { readEvent } from "../src/types.js";
import { PKG } from "./helpers.js";

/** The repository: $ZONEMOUNT_REPO (scripts/test-node.sh builds a copy of
 * clients/node elsewhere), else the one this package is in. */
const REPO = process.env["ZONEMOUNT_REPO"] ?? path.resolve(PKG, "../..");

test("escape shows names as the binary does", () => {
  const table: Array<[string | Buffer, string]> = [
    ["plain.txt", "plain.txt"],
    ["a\\b", "a\\\\b"],
    ["t\tn\nr\r", "t\\tn\\nr\\r"],
    ["\x1b[2K\x7f", "\\x1b[2K\\x7f"],
    [Buffer.from([0x61, 0xff, 0xc3]), "a\\xff\\xc3"],
    [Buffer.from([0xed, 0xa0, 0x80]), "\\xed\\xa0\\x80"], // a surrogate is not UTF-8
    ["\u202e\u200b\u0085", "\\u{202e}\\u{200b}\\u{85}"],
    ["\u{e0041}", "\\u{e0041}"],
    ["żółw 🐢", "żółw 🐢"],
  ];
  for (const [input, want] of table) assert.equal(zm.escape(input), want, JSON.stringify(input));
});

test("escape is the binary's over every code point (clients/escaped-code-points.txt)", () => {
  // The table lists what the binary escapes; a unit test of its
  // src/text.rs checks that.
  const table = path.join(REPO, "clients/escaped-code-points.txt");
  const ranges: Array<[number, number]> = [];
  for (const raw of fs.readFileSync(table, "utf8").split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const [lo, hi] = line.split("..");
    ranges.push([parseInt(lo ?? "", 16), parseInt(hi ?? lo ?? "", 16)]);
  }
  assert.ok(ranges.length > 0 && ranges.every(([lo, hi]) => lo <= hi), `${table} lists ranges`);
  const listed = (cp: number): boolean => ranges.some(([lo, hi]) => lo <= cp && cp <= hi);
  const special: Record<string, string> = { "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r" };
  const expected = (cp: number): string => {
    const ch = String.fromCodePoint(cp);
    if (!listed(cp)) return ch;
    const named = special[ch];
    if (named !== undefined) return named;
    if (cp < 0x80) return `\\x${cp.toString(16).padStart(2, "0")}`;
    return `\\u{${cp.toString(16)}}`;
  };
  const cps: number[] = [];
  for (let cp = 0; cp <= 0x10ffff; cp++) if (cp < 0xd800 || cp > 0xdfff) cps.push(cp);
  const got = zm.escape(cps.map((cp) => String.fromCodePoint(cp)).join(""));
  const want = cps.map(expected).join("");
  if (got !== want) {
    const bad = cps
      .filter((cp) => zm.escape(String.fromCodePoint(cp)) !== expected(cp))
      .map((cp) => `U+${cp.toString(16).padStart(4, "0")}: ${JSON.stringify(zm.escape(String.fromCodePoint(cp)))}, the binary ${JSON.stringify(expected(cp))}`);
    assert.fail(`escape differs from the binary (${table}) at ${bad.length} code points: ${bad.slice(0, 20).join("; ")}`);
  }
});

test("spaces, look-alikes of > and ignorables are escaped", () => {
  for (const cp of [
    0x00a0, 0x1680, 0x2003, 0x202f, 0x205f, 0x3000, 0x2800, 0x3164, 0x0336, 0x0338, 0xff1e, 0x203a, 0x276f, 0x02c3,
    0x3009, 0x232a, 0x17b4, 0x17b5, 0x180b, 0x180d, 0x180f, 0x2065, 0xfff0, 0xfff8, 0xe0080, 0xe00ff, 0xe01f0, 0xe0fff,
  ]) {
    assert.equal(zm.escape(`a${String.fromCodePoint(cp)}b`), `a\\u{${cp.toString(16)}}b`);
  }
  assert.equal(
    zm.escape("evil.sh\u00a0\u00a0(0644, 4 bytes)\u00a0\u00a0by git"),
    "evil.sh\\u{a0}\\u{a0}(0644, 4 bytes)\\u{a0}\\u{a0}by git",
  );
  // Ordinary text, dashes among it, stays as it is.
  const plain = "Q3 \u2013 report \u2014 d\u00e9j\u00e0 vu \u65e5.md";
  assert.equal(zm.escape(plain), plain);
});

test("exact reads a field's bytes: _b64 first, then the text", () => {
  assert.deepEqual(zm.exact({ path: "/a\ufffd", path_b64: "L2H/" }, "path"), Buffer.from([0x2f, 0x61, 0xff]));
  assert.deepEqual(zm.exact({ path: "/é" }, "path"), Buffer.from("/é", "utf8"));
  assert.equal(zm.exact({ path: "/a" }, "target"), null);
});

test("the registry's key is the daemon's FNV-1a", () => {
  // FNV-1a 64 of "" is its offset basis; "a" is a published test vector.
  assert.equal(zm.mountKey(""), "cbf29ce484222325");
  assert.equal(zm.mountKey("a"), "af63dc4c8601ec8c");
  assert.equal(zm.mountKey(Buffer.from("/tmp/\xff", "latin1")), zm.mountKey(Buffer.from([0x2f, 0x74, 0x6d, 0x70, 0x2f, 0xff])));
});

test("what isn't the protocol is a ProtocolError", () => {
  assert.throws(() => readEvent({ v: 1, event: "request", request: { id: "1" } }), zm.ProtocolError);
  assert.throws(() => readEvent({ v: 1, event: "resolved", outcome: "allow" }), /without a number "id"/);
  assert.throws(() => readEvent({ v: 1, event: "party" }), /an event the client doesn't know/);
  assert.throws(() => readEvent({ v: 2, event: "lagged", missed: 1 }), /another protocol version/);
  const ev = readEvent({ v: 1, event: "lagged", missed: 4 });
  assert.ok(ev.event === "lagged" && ev.missed === 4);
});
