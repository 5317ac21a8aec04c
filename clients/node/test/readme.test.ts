// The README's TypeScript examples type-check against the client as
// built (imported by its package name, as a project that installed it
// would).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { PKG } from "./helpers.js";

/** The bodies of the ```ts blocks of `text`. */
function tsBlocks(text: string): string[] {
  const out: string[] = [];
  let cur: string[] | null = null;
  for (const line of text.split("\n")) {
    if (cur === null && line === "```ts") cur = [];
    else if (cur !== null && line.startsWith("```")) {
      out.push(cur.join("\n"));
      cur = null;
    } else cur?.push(line);
  }
  return out;
}

test("the README's TypeScript examples type-check", { timeout: 120_000 }, () => {
  const blocks = tsBlocks(fs.readFileSync(path.join(PKG, "README.md"), "utf8"));
  assert.ok(blocks.length > 0, "the README has ```ts blocks");
  const tsc = path.join(PKG, "node_modules/typescript/bin/tsc");
  blocks.forEach((body, i) => {
    // Inside the package, so that `from "zonemount"` resolves to it.
    const file = path.join(PKG, `.readme-example-${process.pid}-${i}.ts`);
    fs.writeFileSync(file, `${body}\nexport {};\n`);
    try {
      const r = spawnSync(
        process.execPath,
        [tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
          "--target", "es2022", "--lib", "es2022", "--types", "node", file],
        { encoding: "utf8", timeout: 100_000 },
      );
      assert.equal(r.status, 0, `README example ${i + 1}:\n${body}\n${r.stdout}${r.stderr}`);
    } finally {
      fs.rmSync(file, { force: true });
    }
  });
});
