// examples/supervisor.ts does what its comments say.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { PKG, canMount, collect, exited, tmpDir, zmBin } from "./helpers.js";

test("the example supervisor allows under one directory, denies the rest, reports", { timeout: 90_000 }, async (t) => {
  zmBin();
  if (!canMount(t)) return;
  const dir = path.join(tmpDir(t), "task");
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, "old.txt"), "keep\n");
  const example = path.join(PKG, "dist/examples/supervisor.js");
  const child = collect(
    t,
    spawn(
      process.execPath,
      [example, "--dir", dir, "--allow-under", "out", "--timeout", "20", "--",
        "sh", "-c", "mkdir out && echo ok > out/a.txt; echo no > b.txt; echo no > outside.txt; rm old.txt; mv out/a.txt c.txt; exit 3"],
      { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, LC_ALL: "C" } },
    ),
  );
  child.proc.stdin.end();
  const done = await exited(child, 80_000);
  assert.equal(done.code, 3, `the worker's status: ${done.stdout}\n${done.stderr}`);
  const lines = done.stdout.split("\n");
  for (const want of [
    "allow write /work/out",
    "allow write /work/out/a.txt",
    "deny  write /work/b.txt",
    "deny  write /work/outside.txt",
    "deny  delete /work/old.txt",
    "deny  write+delete /work/out/a.txt",
    "changes:",
    "  added out",
    "  added out/a.txt",
  ]) {
    assert.ok(lines.includes(want), `${JSON.stringify(want)} in:\n${done.stdout}`);
  }
  assert.equal(lines.filter((l) => l.startsWith("allow ")).length, 2, done.stdout);
  // The directory holds what was allowed and nothing else.
  assert.deepEqual(fs.readdirSync(dir).sort(), ["old.txt", "out"]);
  assert.deepEqual(fs.readdirSync(path.join(dir, "out")), ["a.txt"]);
  assert.equal(fs.readFileSync(path.join(dir, "out/a.txt"), "utf8"), "ok\n");
  // And nothing is left mounted: the temporary mountpoint is gone.
  const mp = lines.find((l) => l.startsWith("mounted "))?.slice("mounted ".length);
  assert.ok(mp !== undefined && mp.startsWith("/"), done.stdout);
  assert.ok(!fs.existsSync(mp), `${mp} is removed`);
  assert.ok(!fs.readFileSync("/proc/self/mountinfo", "utf8").split("\n").some((l) => l.split(" ")[4] === mp));
});
