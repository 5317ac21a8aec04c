// What the tests share: the binary, a project on disk, workers, bounded
// waits. Every wait has a limit and fails when it runs out.

import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import type { TestContext } from "node:test";

/** The package's directory (this file is dist/test/helpers.js in it). */
export const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The zonemount binary: $ZONEMOUNT_BIN, else `zonemount` on PATH; a
 * test without one fails. Sets $ZONEMOUNT_BIN for the client. */
export function zmBin(): string {
  let b = process.env["ZONEMOUNT_BIN"];
  if (!b) {
    b = (process.env["PATH"] ?? "")
      .split(":")
      .filter((d) => d !== "")
      .map((d) => path.join(d, "zonemount"))
      .find((p) => {
        try {
          fs.accessSync(p, fs.constants.X_OK);
          return true;
        } catch {
          return false;
        }
      });
  }
  if (!b) throw new Error("no zonemount binary: put it on PATH or set ZONEMOUNT_BIN (cargo build; target/debug/zonemount)");
  fs.accessSync(b, fs.constants.X_OK);
  process.env["ZONEMOUNT_BIN"] = b;
  return b;
}

/** What a test needs from the machine: without it the test skips with a
 * `ZONEMOUNT-SKIP:` line (and one in $ZONEMOUNT_SKIP_LOG), except under
 * CI=true, where it fails. */
export function require_(t: TestContext, what: string, ok: boolean): boolean {
  if (ok) return true;
  if (process.env["CI"] === "true") throw new Error(`needs ${what} (CI=true: failing instead of skipping)`);
  const line = `ZONEMOUNT-SKIP: node::${t.name}: needs ${what}`;
  console.log(line);
  const log = process.env["ZONEMOUNT_SKIP_LOG"];
  if (log) fs.appendFileSync(log, `${line}\n`);
  t.skip(`needs ${what}`);
  return false;
}

/** Whether this machine can mount: /dev/fuse, and root or fusermount3. */
export function canMount(t: TestContext): boolean {
  if (!require_(t, "/dev/fuse", fs.existsSync("/dev/fuse"))) return false;
  const root = process.geteuid?.() === 0;
  const fusermount = (process.env["PATH"] ?? "").split(":").some((d) => d !== "" && fs.existsSync(path.join(d, "fusermount3")));
  return require_(t, "root or fusermount3", root || fusermount);
}

/** A fresh directory, removed after the test. */
export function tmpDir(t: TestContext): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "zmnode-"));
  t.after(() => {
    // A mount a failed test left under it: unmounted by its exact path.
    const left = fs
      .readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[4] ?? "")
      .filter((mp) => mp.startsWith(`${d}/`));
    for (const mp of left) {
      const bin = process.env["ZONEMOUNT_BIN"] ?? "zonemount";
      if (spawnSync(bin, ["unmount", mp], { stdio: "ignore", timeout: 30_000 }).status !== 0) {
        spawnSync(bin, ["unmount", "--lazy", mp], { stdio: "ignore", timeout: 30_000 });
      }
    }
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch {
      // a mount left behind keeps it; the mount's own check says so
    }
  });
  return d;
}

/** A direct-mode project in `dir`: `data` (ro, `readme.txt`) and `final`
 * (rw, writes and deletes ask); `mnt` to mount on. */
export function project(dir: string): { config: string; mnt: string; data: string; final: string } {
  const data = path.join(dir, "data");
  const final = path.join(dir, "final");
  const mnt = path.join(dir, "mnt");
  for (const d of [data, final, mnt]) fs.mkdirSync(d);
  fs.writeFileSync(path.join(data, "readme.txt"), "hello\n");
  const config = path.join(dir, "project.yaml");
  fs.writeFileSync(
    config,
    "sandbox:\n" +
      "  mode: direct\n" +
      "  zones:\n" +
      "    - {name: data, path: ./data, mode: ro}\n" +
      "    - {name: final, path: ./final, mode: rw, approval: {write: ask, delete: ask}}\n",
  );
  return { config, mnt, data, final };
}

/** Whether `p` is a mountpoint now (/proc/self/mountinfo). */
export function isMounted(p: string): boolean {
  const want = fs.realpathSync(p);
  return fs
    .readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .some((l) => l.split(" ")[4] === want);
}

/** Poll `probe` (bounded) until it gives something truthy. */
export async function waitFor<T>(what: string, probe: () => Promise<T> | T, limitMs = 20_000): Promise<T> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const got = await probe();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out after ${limitMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A child whose output is collected from its start. */
export interface Child {
  proc: ChildProcessWithoutNullStreams;
  /** Its exit, once it exited and its pipes closed. */
  done: Promise<Exit>;
}

/** `proc`, its output collected, killed after the test if still running. */
export function collect(t: TestContext, proc: ChildProcessWithoutNullStreams): Child {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  proc.stdout.on("data", (d: Buffer) => out.push(d));
  proc.stderr.on("data", (d: Buffer) => err.push(d));
  const done = new Promise<Exit>((resolve) => {
    proc.on("close", (code, signal) => {
      resolve({ code, signal, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") });
    });
  });
  t.after(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
  });
  return { proc, done };
}

/** A worker shell in `cwd` (inside the mount), in a session of its own
 * (a decision from the worker's own session is refused). */
export function worker(t: TestContext, script: string, cwd: string): Child {
  const proc = spawn("sh", ["-c", script], {
    cwd,
    detached: true,
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, LC_ALL: "C" },
  });
  proc.stdin.end();
  return collect(t, proc);
}

/** The child's exit within `limitMs`; else it is killed and this throws. */
export async function exited(child: Child, limitMs = 20_000): Promise<Exit> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      child.proc.kill("SIGKILL");
      reject(new Error(`pid ${child.proc.pid} did not exit within ${limitMs / 1000} s`));
    }, limitMs);
  });
  try {
    return await Promise.race([child.done, late]);
  } finally {
    clearTimeout(timer);
  }
}
