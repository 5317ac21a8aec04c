/**
 * Finding a mount's control socket from its mountpoint, as the `zonemount`
 * binary does.
 *
 * The daemon writes one JSON record per mount into its runtime directory
 * (`mounts/<key>.json`, `<key>` being the FNV-1a hash of the canonical
 * mountpoint); the record names the control socket. The runtime directory
 * is `/run/zonemount` for root; for a user `$XDG_RUNTIME_DIR/zonemount`,
 * else `/run/user/UID/zonemount` when that directory is the user's, else
 * `/tmp/zonemount-UID`. A user may also reach a mount root made for them,
 * so root's registry is looked at second.
 *
 * A record names the socket the client trusts with decisions, so a
 * directory is read only when the binary would read it: a directory (not a
 * symbolic link) owned by this user (root's: by root) that nobody else may
 * write in. When this user's runtime directory or its `mounts` is not such
 * a directory, nothing is read (not root's registry either) and
 * {@link NotMountedError} says why, as the binary refuses it. A record of
 * another mount namespace is not this one's mount.
 */

import * as fs from "node:fs";
import * as path from "node:path";

import { NotMountedError } from "./errors.js";

/** Root's runtime directory. */
export const ROOT_RUNTIME_DIR = "/run/zonemount";

function euid(): number {
  return process.geteuid?.() ?? 0;
}

/** This user's runtime directory, as the daemon computes it. */
export function runtimeDir(): string {
  const uid = euid();
  if (uid === 0) return ROOT_RUNTIME_DIR;
  const xdg = process.env["XDG_RUNTIME_DIR"];
  if (xdg) return path.join(xdg, "zonemount");
  const runUser = `/run/user/${uid}`;
  try {
    const st = fs.statSync(runUser);
    if (st.isDirectory() && st.uid === uid) return path.join(runUser, "zonemount");
  } catch {
    // not there: the fallback below
  }
  return `/tmp/zonemount-${uid}`;
}

/** FNV-1a (64 bit) of the mountpoint's bytes, as 16 hex digits. */
export function mountKey(mountpoint: string | Buffer): string {
  const bytes = typeof mountpoint === "string" ? Buffer.from(mountpoint, "utf8") : mountpoint;
  const mask = 0xffffffffffffffffn;
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & mask;
  }
  return h.toString(16).padStart(16, "0");
}

/** Why `dir` can't be trusted to hold `owner`'s records (null: it can, or
 * it is missing and holds nothing), as the binary judges it. */
function unfit(dir: string, owner: number): string | null {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(dir);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    return `can't be examined (${code ?? String(e)})`;
  }
  if (st.isSymbolicLink()) return "is a symbolic link";
  if (!st.isDirectory()) return "is not a directory";
  if (st.uid !== owner) return `belongs to uid ${st.uid}, not to uid ${owner}`;
  if ((st.mode & 0o022) !== 0) {
    return `has mode ${(st.mode & 0o7777).toString(8).padStart(4, "0")}: others may write in it`;
  }
  return null;
}

/** A mount's registry record: the fields the client reads (the daemon
 * writes more). */
export interface MountRecord {
  mountpoint: string;
  /** The daemon. */
  pid: number;
  /** The control socket. */
  control?: string | null;
  /** The zone names. */
  zones?: string[];
  /** The daemon's mount namespace (the inode of /proc/self/ns/mnt). */
  mntns?: number | null;
  [key: string]: unknown;
}

function readRecord(file: string): MountRecord | null {
  let data: unknown;
  try {
    data = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return null;
  }
  if (typeof data !== "object" || data === null || Array.isArray(data)) return null;
  const rec = data as Record<string, unknown>;
  if (typeof rec["mountpoint"] !== "string") return null;
  return rec as MountRecord;
}

/** This process's mount namespace: the inode of /proc/self/ns/mnt. */
function mountNamespace(): number | null {
  try {
    return fs.statSync("/proc/self/ns/mnt").ino;
  } catch {
    return null;
  }
}

/** Whether the record's mount lives in this mount namespace (a record
 * without `mntns`, from an older daemon, counts as this one's). */
function here(rec: MountRecord): boolean {
  const theirs = rec.mntns;
  const ours = mountNamespace();
  return typeof theirs !== "number" || ours === null || theirs === ours;
}

/**
 * The registry record of the mount at `mountpoint` (resolved as the
 * daemon resolved it: `realpath`). Throws {@link NotMountedError} when no
 * daemon recorded it where this user may look.
 */
export function findRecord(mountpoint: string): MountRecord {
  let mp: string;
  try {
    mp = fs.realpathSync(mountpoint);
  } catch {
    mp = path.resolve(mountpoint);
  }
  const name = `${mountKey(mp)}.json`;
  const own = runtimeDir();
  const bases: Array<[string, number]> = [[own, euid()]];
  if (own !== ROOT_RUNTIME_DIR) bases.push([ROOT_RUNTIME_DIR, 0]);
  for (const [base, owner] of bases) {
    const mounts = path.join(base, "mounts");
    const baseWhy = unfit(base, owner);
    const mountsWhy = baseWhy === null ? unfit(mounts, owner) : null;
    const why = baseWhy !== null ? `${base} ${baseWhy}` : mountsWhy !== null ? `${mounts} ${mountsWhy}` : null;
    if (why !== null) {
      // This user's: refused outright, as the binary refuses it. Root's:
      // read only as root keeps it.
      if (base !== own) continue;
      throw new NotMountedError(
        `the runtime directory ${why}: zonemount won't read mount records there ` +
          "(another user may have made it); remove it, or set XDG_RUNTIME_DIR to a directory of your own",
      );
    }
    const rec = readRecord(path.join(mounts, name));
    if (rec !== null && rec.mountpoint === mp && here(rec)) return rec;
  }
  throw new NotMountedError(
    `${mp} is not a zonemount mount this user can see: no record in ` +
      `${path.join(own, "mounts")} (is it mounted? zonemount list)`,
  );
}

/** The control socket of the mount at `mountpoint`. */
export function controlSocket(mountpoint: string): string {
  const rec = findRecord(mountpoint);
  const control = rec.control;
  if (typeof control !== "string" || control === "") {
    throw new NotMountedError(`the record of ${rec.mountpoint} names no control socket`);
  }
  return control;
}
