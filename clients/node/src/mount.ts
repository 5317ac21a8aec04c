/**
 * Running the `zonemount` binary: mounts that are always unmounted.
 *
 * {@link run} mounts, calls a function with the mount, and unmounts however
 * the function ends. {@link mount} returns the mount for the caller to
 * {@link Mount.unmount}; until then it is also unmounted when the process
 * exits normally or gets SIGINT, SIGTERM or SIGHUP, also while
 * `zonemount mount` is still making it (the handler waits for that command,
 * up to 30 s, then unmounts what it made). (Nothing runs on
 * SIGKILL: the mount then stays until `zonemount unmount MOUNTPOINT`.)
 */

import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

import { Client } from "./client.js";
import { CommandError, ZonemountError } from "./errors.js";

/** The `zonemount` binary: `explicit`, else `$ZONEMOUNT_BIN`, else
 * `zonemount` on PATH. */
export function binary(explicit?: string): string {
  if (explicit) return explicit;
  const env = process.env["ZONEMOUNT_BIN"];
  if (env) return env;
  for (const dir of (process.env["PATH"] ?? "").split(":")) {
    if (dir === "") continue;
    const p = path.join(dir, "zonemount");
    try {
      fs.accessSync(p, fs.constants.X_OK);
      if (fs.statSync(p).isFile()) return p;
    } catch {
      // not here
    }
  }
  throw new ZonemountError(
    "the zonemount binary is not on PATH: install it (cargo install --locked --path .) or set ZONEMOUNT_BIN",
  );
}

export interface RunCliOptions {
  /** The binary (see {@link binary}). */
  bin?: string;
  /** Kill it after this many milliseconds (default 120000). */
  timeoutMs?: number;
}

/** The message of a failed command: its first line on stderr, without
 * the `zonemount: ` prefix. */
function firstLine(stderr: string, fallback: string): string {
  const l = stderr.split("\n").find((s) => s.trim() !== "");
  return l === undefined ? fallback : l.replace(/^zonemount: /, "");
}

/** Run `zonemount ARGS`: its stdout, or a {@link CommandError} with its
 * one-line message and exit status. */
export function runCli(args: string[], options: RunCliOptions = {}): Promise<string> {
  return runChild(args, options, () => undefined);
}

/** {@link runCli}, telling `spawned` the child's pid. */
function runChild(args: string[], options: RunCliOptions, spawned: (pid: number) => void): Promise<string> {
  const exe = binary(options.bin);
  const timeoutMs = options.timeoutMs ?? 120_000;
  return new Promise((resolve, reject) => {
    const child = spawn(exe, args, { stdio: ["ignore", "pipe", "pipe"] });
    if (child.pid !== undefined) spawned(child.pid);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => err.push(d));
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new ZonemountError(`cannot run ${exe}: ${e.message}`, { cause: e }));
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const stderr = Buffer.concat(err).toString("utf8");
      if (timedOut) {
        reject(new ZonemountError(`zonemount ${args.join(" ")} did not finish within ${timeoutMs / 1000} s`));
      } else if (code !== 0) {
        const fallback = `zonemount ${args[0] ?? ""} ${signal === null ? `exited ${code}` : `was killed by ${signal}`}`;
        reject(new CommandError(firstLine(stderr, fallback), code, stderr));
      } else {
        resolve(Buffer.concat(out).toString("utf8"));
      }
    });
  });
}

export interface MountOptions {
  /** Where to mount; default: a fresh temporary directory, removed after
   * the unmount. */
  mountpoint?: string;
  /** The project file (`--config`). */
  config?: string;
  /** Worker files (`--worker`). */
  workers?: string[];
  /** `NAME=PATH[:ro|rw|staged]` (`--zone`): added to `config` or `preset`
   * when given, else the whole mount. */
  zones?: string[];
  /** A built-in config (`--preset`). */
  preset?: string;
  /** More `mount` options (`--approval-timeout`, `--audit-log`,
   * `--stage-dir`, ...). */
  args?: string[];
  /** The binary (see {@link binary}). */
  bin?: string;
}

/** `zonemount unmount MP`, else `--lazy`, synchronously; what fails is
 * written to stderr. */
function unmountNow(bin: string, mp: string): void {
  for (const args of [["unmount", mp], ["unmount", "--lazy", mp]]) {
    const r = spawnSync(bin, args, { stdio: ["ignore", "ignore", "pipe"], timeout: 60_000 });
    if (r.status === 0) return;
    const why = r.stderr?.toString("utf8") ?? "";
    process.stderr.write(`zonemount client: ${firstLine(why, `unmount of ${mp} failed`)}\n`);
  }
}

/** Mounts not yet unmounted, unmounted on exit and on signals. */
const live = new Set<Mount>();
/** Mounts being made: the `zonemount mount` command's pid, the binary and
 * the mountpoint. */
const mounting = new Map<number, { bin: string; mp: string }>();
const SIGNALS: NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];
let hooked = false;

/** Sleep `ms` without the event loop (exit and signal handlers can't
 * wait for it). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Wait (bounded) until process `pid` has ended: gone, or a zombie
 * nobody reaped yet. */
function waitGone(pid: number, limitMs: number): void {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      return;
    }
    // `pid (comm) S ...`: the state follows the last ')'.
    if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) return;
    sleepSync(20);
  }
}

/** Whether `mp` is a mountpoint in this mount namespace now. */
function mountedAt(mp: string): boolean {
  let info: string;
  try {
    info = fs.readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return true; // can't tell: try the unmount
  }
  const unescape = (f: string): string => f.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  return info.split("\n").some((l) => unescape(l.split(" ")[4] ?? "") === mp);
}

function onExit(): void {
  // A mount being made: let its command finish, then unmount what it made.
  for (const [pid, { bin, mp }] of [...mounting]) {
    waitGone(pid, 30_000);
    if (mountedAt(mp)) unmountNow(bin, mp);
    mounting.delete(pid);
  }
  for (const m of [...live]) m.unmountSync();
}

function onSignal(sig: NodeJS.Signals): void {
  onExit();
  unhook();
  // Die of the signal as if nobody had caught it, unless someone else
  // handles it.
  if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
}

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on("exit", onExit);
  for (const s of SIGNALS) process.on(s, onSignal);
}

function unhook(): void {
  if (!hooked) return;
  hooked = false;
  process.off("exit", onExit);
  for (const s of SIGNALS) process.off(s, onSignal);
}

/** A live mount made by {@link mount} or {@link run}. */
export class Mount {
  /** The mountpoint, resolved (`realpath`). */
  readonly mountpoint: string;
  /** Its control socket's client. */
  readonly client: Client;
  /** The binary that made it. */
  readonly bin: string;
  private readonly made: string | null;
  private done: Promise<void> | null = null;

  /** @internal */
  constructor(mountpoint: string, client: Client, bin: string, made: string | null) {
    this.mountpoint = mountpoint;
    this.client = client;
    this.bin = bin;
    this.made = made;
  }

  /** Unmount now (`zonemount unmount`, which denies what is still pending
   * and waits for the daemon; lazily if the mount is still busy). Later
   * calls return the same promise. */
  unmount(): Promise<void> {
    this.done ??= (async () => {
      try {
        await runCli(["unmount", this.mountpoint], { bin: this.bin });
      } catch (e) {
        if (!(e instanceof CommandError)) throw e;
        await runCli(["unmount", "--lazy", this.mountpoint], { bin: this.bin });
      } finally {
        this.forget();
      }
    })();
    return this.done;
  }

  /** {@link unmount}, synchronously: what exit and signal handlers can do.
   * Errors are written to stderr, not thrown. */
  unmountSync(): void {
    if (this.done !== null && !live.has(this)) return;
    unmountNow(this.bin, this.mountpoint);
    this.done = Promise.resolve();
    this.forget();
  }

  private forget(): void {
    live.delete(this);
    if (live.size === 0 && mounting.size === 0) unhook();
    removeMade(this.made);
  }
}

/** Remove the temporary mountpoint `made` (if any): only when empty. */
function removeMade(made: string | null): void {
  if (made === null) return;
  try {
    fs.rmdirSync(made);
  } catch {
    // still mounted (lazily) or not empty: left for the user
  }
}

/**
 * Mount with `zonemount mount`. The mount is the caller's to
 * {@link Mount.unmount}; it is also unmounted when the process exits or
 * gets SIGINT, SIGTERM or SIGHUP first. Errors are {@link CommandError}s
 * with the command's own one-line message and exit status (2 for a
 * config error).
 */
export async function mount(options: MountOptions = {}): Promise<Mount> {
  const exe = binary(options.bin);
  let made: string | null = null;
  let mp = options.mountpoint;
  if (mp === undefined) {
    made = fs.mkdtempSync(path.join(os.tmpdir(), "zonemount-"));
    mp = made;
  }
  try {
    try {
      mp = fs.realpathSync(mp);
    } catch {
      // Missing or unreachable: the command says so, with its exit status.
      mp = path.resolve(mp);
    }
    const argv = ["mount", "-q"];
    if (options.config !== undefined) argv.push("--config", options.config);
    for (const w of options.workers ?? []) argv.push("--worker", w);
    if (options.preset !== undefined) argv.push("--preset", options.preset);
    for (const z of options.zones ?? []) argv.push("--zone", z);
    argv.push(...(options.args ?? []), mp);
    // Hooked before the command runs: a signal while it mounts still
    // unmounts what it made.
    hook();
    const where = mp;
    let pid: number | null = null;
    try {
      await runChild(argv, { bin: exe }, (p) => {
        pid = p;
        mounting.set(p, { bin: exe, mp: where });
      });
    } finally {
      if (pid !== null) mounting.delete(pid);
    }
  } catch (e) {
    if (live.size === 0 && mounting.size === 0) unhook();
    removeMade(made);
    throw e;
  }
  // From here to `live.add` nothing waits: no signal handler runs between.
  let client: Client;
  try {
    client = Client.forMount(mp);
  } catch (e) {
    // Mounted, but its record can't be read: unmount it rather than
    // leave it behind.
    unmountNow(exe, mp);
    if (live.size === 0 && mounting.size === 0) unhook();
    removeMade(made);
    throw e;
  }
  const mounted = new Mount(mp, client, exe, made);
  live.add(mounted);
  return mounted;
}

/**
 * Mount, call `fn` with the mount, and unmount however `fn` ends (its
 * value is returned, its error rethrown after the unmount).
 */
export async function run<T>(options: MountOptions, fn: (m: Mount) => Promise<T> | T): Promise<T> {
  const m = await mount(options);
  try {
    return await fn(m);
  } finally {
    await m.unmount();
  }
}
