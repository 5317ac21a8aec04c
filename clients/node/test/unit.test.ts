// What needs no mount: escaping, exact names, the registry's key, the
// checks on what the daemon sends.

import assert from "node:assert/strict";
import { test } from "node:test";

import * as zm from "../src/index.js";
import { readEvent } from "../src/types.js";

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
