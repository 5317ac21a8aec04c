/**
 * The control protocol's messages as types, as the wire has them (field
 * names included), and the checks that read them: an answer that lacks a
 * field its type promises is a {@link ProtocolError}, never a silent
 * `undefined`. Fields the client doesn't know are kept.
 *
 * A name or command line a worker chose is exact on the wire: beside a
 * text field whose bytes are not UTF-8 (the text then holds U+FFFD in
 * their place) stands `<field>_b64`, the bytes in base64. {@link exact}
 * reads a field that way; {@link escape} shows it to people.
 */

import { ProtocolError } from "./errors.js";

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;

/** How far an allow reaches: this request only, this class on this path
 * for the rest of the mount, or this class anywhere in the zone. */
export type Scope = "once" | "path" | "zone";

/** How a request ended. */
export type Outcome = "allow" | "deny" | "timeout" | "withdrawn";

/** A zone's rule for a class of operation. */
export type ApprovalRule = "preApproved" | "ask" | "blocked";

/** One class on one path that a request asks for (a rename asks for
 * `write` on the target and `delete` on the source). */
export interface Item {
  class: string;
  zone: string;
  path: string;
  path_b64?: string;
}

/** A syscall waiting for a decision. */
export interface Request {
  id: number;
  zone: string;
  /** `write`, `delete`, `read`, or two joined by `+` (a rename). */
  class: string;
  /** The operation: `create`, `write`, `unlink`, `rename`, ... */
  op: string;
  /** The path as the worker sees it (a rename's source). */
  path: string;
  path_b64?: string;
  /** A rename's destination; a hard link's existing file (its new name
   * is `path`). */
  target?: string;
  target_b64?: string;
  /** The calling process (thread group) and its uid. */
  pid: number;
  uid: number;
  /** `/proc/PID/cmdline`, its arguments joined by spaces. */
  cmdline: string;
  cmdline_b64?: string;
  /** When it started waiting (RFC 3339, UTC). */
  time: string;
  /** Seconds left before it is denied (when it was listed). */
  timeout_secs: number;
  items: Item[];
  /** The caller was told to retry once this is decided (a mkdir, rm,
   * mv... can't wait while the kernel locks its directory). */
  retry?: boolean;
  /** Calls held until the decision when it was listed (for a create whose
   * file was made at once: the writes on that file); left out when none. */
  waiting?: number;
}

/** A request is waiting (already, or new). */
export interface RequestEvent {
  v: number;
  event: "request";
  request: Request;
}

/** A request is no longer waiting. */
export interface ResolvedEvent {
  v: number;
  event: "resolved";
  id: number;
  outcome: Outcome;
  /** An allow's scope. */
  scope?: Scope;
  /** Who decided (absent for a timeout, a withdrawal, or a decision the
   * daemon made itself). */
  approver_uid?: number;
  /** Why, when the deny was not a person's. */
  reason?: string;
}

/** The watcher fell behind and missed `missed` events. */
export interface LaggedEvent {
  v: number;
  event: "lagged";
  missed: number;
}

/** One line of a `watch` stream; narrow it on `event`. */
export type Event = RequestEvent | ResolvedEvent | LaggedEvent;

/** A zone's policy, as the config has it. */
export interface PolicyStatus {
  access: "ro" | "rw";
  approval: { write: ApprovalRule; delete: ApprovalRule; read?: ApprovalRule };
  /** null: every name. */
  suffixes: string[] | null;
  max_file_bytes: number | null;
  protect: string[];
  hide?: string[];
  /** Sensitive roots hidden inside the backing dir, relative to it. */
  hidden?: string[];
  /** Changes go to a stage until committed. */
  staged?: boolean;
  [key: string]: unknown;
}

/** One zone of a {@link Status}. */
export interface ZoneStatus {
  name: string;
  backing: string;
  policy: PolicyStatus;
  /** Under `run --isolate`: bound straight from its backing dir
   * (`direct`) or served by the daemon, and why. */
  isolate?: { direct: boolean; why: string };
}

/** A refusal the filesystem gave, explained. */
export interface RecentRefusal {
  time: string;
  path: string;
  path_b64?: string;
  /** The errno's name, e.g. `EROFS`. */
  errno: string;
  reason: string;
  message: string;
}

/** What keeps `run`'s worker from deciding for itself. */
export type WorkerBoundary =
  | { kind: "pid-namespace"; ns: number }
  | { kind: "session"; why: string }
  | { kind: "isolate" };

/** A mount's status: what `zonemount status` shows. */
export interface Status {
  mountpoint: string;
  /** The daemon. */
  pid: number;
  /** Seconds since the epoch. */
  started: number;
  /** The project file; null: the embedded default. */
  config: string | null;
  workers: string[];
  /** The `--zone` arguments, as given. */
  zone_args?: string[];
  /** The control socket. */
  control: string;
  audit_log: string | null;
  approval_timeout_secs: number;
  no_approvals: boolean;
  /** Who may use the control socket (besides root). */
  owner_uid: number;
  sandbox_mode: "sandboxed" | "direct";
  zones: ZoneStatus[];
  pending: Request[];
  /** The broker's counters by name. */
  counters: Record<string, number>;
  io?: {
    mode: string;
    detail: string;
    transport?: string;
    transport_detail?: string;
    /** How long a /dev/fuse thread polls for the next request after a reply, in µs (0: never). */
    busy_poll_us?: number;
    /** Why no /dev/fuse thread polls now although busy_poll_us is above 0 (one CPU, or a CPU quota below the CPUs it may run on); absent while polling may happen. */
    busy_poll_off?: string;
    /** Whether the daemon now keeps idle CPUs polling (it does while requests come close together). */
    idle_poll_held?: boolean;
    /** Why it can't (not root, no /dev/cpu_dma_latency, --busy-poll 0, busy polling held back); absent while it may. */
    idle_poll_off?: string;
  };
  cache_ttl_secs?: { rw: number; ro: number };
  /** The last refusals, oldest first. */
  recent_refusals: RecentRefusal[];
  /** What the daemon could not use, and what that costs. */
  degraded?: Array<{ feature: string; needs: string; cost: string }>;
  /** Where the staged zones keep their changes. */
  stage_dir?: string;
  worker_boundary?: WorkerBoundary;
  /** FUSE requests answered since the mount, by opcode name. */
  fuse_requests?: Record<string, number>;
  [key: string]: unknown;
}

/** One changed path of a zone: of a staged zone (every field the change
 * has) or of a plain rw zone (`path` and `kind` only, no renames). */
/** Who made a change: the process (its id as the daemon sees it), its
 * command, the caller's uid, and when. The command is what the process
 * presented (a worker can set its own argv and comm), not proof. */
export interface Actor {
  pid: number;
  uid: number;
  /** RFC 3339, UTC. */
  time: string;
  /** The process's name (at most 15 bytes); absent when unknown (the
   * process was gone before it could be read). */
  comm?: string;
  comm_b64?: string;
  /** The first 512 bytes of its argv, NULs as spaces; absent when unknown. */
  argv?: string;
  argv_b64?: string;
}

export interface Change {
  /** Relative to the zone's directory. */
  path: string;
  path_b64?: string;
  kind: "added" | "modified" | "deleted" | "renamed";
  /** A rename's source. */
  from?: string;
  from_b64?: string;
  file_type?: "file" | "dir" | "symlink" | "special";
  size?: number;
  mode?: number;
  old_size?: number;
  old_mode?: number;
  /** A deleted tree, or a dir replaced by a file or symlink (which removes it): how many entries it held. */
  entries?: number;
  /** What differs in a modification. */
  what?: Array<"content" | "mode" | "owner" | "times" | "xattrs" | "target" | "type">;
  /** With `diff`: a unified diff of a text file, or a line for a mode or a
   * symlink's target ("" when there is nothing to show). */
  diff?: string;
  /** The process that made the path's first change, and its last. */
  first?: Actor;
  last?: Actor;
  [key: string]: unknown;
}

/** A path a commit left in the stage, and why. `path` "" is the whole
 * zone (a worker has files of it open for writing). */
export interface Conflict {
  path: string;
  path_b64?: string;
  why: string;
  /** Where the host's change is, when not at `path` itself. */
  at?: string;
  at_b64?: string;
}

/** One rw zone's changes: for a staged zone what its stage holds, for a
 * plain one what the mount's workers changed since it was mounted. */
export interface ZoneChanges {
  zone: string;
  staged: boolean;
  changes: Change[];
  /** A plain zone whose workers changed more paths than the mount
   * remembers: `changes` is not all. */
  incomplete?: boolean;
  /** With `patch`: a staged zone's changes as one patch in git's extended
   * diff format (what `git apply` applies to a copy of the backing dir). */
  patch?: string;
}

/** The answer to `changes`. */
export interface ChangesReport {
  zones: ZoneChanges[];
}

/** One staged zone's commit. */
export interface ZoneCommit {
  zone: string;
  applied: Change[];
  conflicts: Conflict[];
}

/** The answer to `commit`. */
export interface CommitReport {
  zones: ZoneCommit[];
}

/** One staged zone's discard; `conflicts` is there only for a zone left
 * alone (a worker has files of it open for writing). */
export interface ZoneDiscard {
  zone: string;
  discarded: Change[];
  conflicts?: Conflict[];
}

/** The answer to `discard`. */
export interface DiscardReport {
  zones: ZoneDiscard[];
}

/** One checkpoint of a staged zone. */
export interface CheckpointInfo {
  /** Never reused in a stage. */
  id: number;
  /** When it was taken (RFC 3339, UTC). */
  time: string;
  label?: string;
  /** `checkpoints` only: how many paths changed since the checkpoint
   * before it (the oldest: since the backing dir). */
  paths?: number;
}

/** One staged zone's checkpoints, oldest first. */
export interface ZoneCheckpoints {
  zone: string;
  checkpoints: CheckpointInfo[];
  /** `checkpoint` only, when the zone took none: why. */
  skipped?: string;
}

/** The answer to `checkpoint` (`id`: the one taken, the same in every
 * zone) and to `checkpoints` (no `id`). */
export interface CheckpointsReport {
  id?: number;
  zones: ZoneCheckpoints[];
}

/** One staged zone's rewind. */
export interface ZoneRewind {
  zone: string;
  /** The checkpoint the zone (or `paths`) now shows. */
  to: number;
  /** The checkpoints after it, dropped (a whole-zone rewind). */
  dropped: number[];
  /** A rewind of some paths: those, relative to the zone's directory. */
  paths?: string[];
  /** A rewind of some paths: those of them unchanged since the checkpoint, left as they are. */
  unchanged?: string[];
  /** The zone was left alone: why (a worker has files of it open for
   * writing). */
  left_alone?: string;
}

/** The answer to `rewind`. */
export interface RewindReport {
  zones: ZoneRewind[];
}

/**
 * The exact bytes of field `key` of a protocol object: its `<key>_b64`
 * sibling when present (the bytes are not UTF-8), else the text's UTF-8;
 * null when the field is absent.
 */
export function exact(obj: object, key: string): Buffer | null {
  const o = obj as Record<string, unknown>;
  const b64 = o[`${key}_b64`];
  if (typeof b64 === "string") return Buffer.from(b64, "base64");
  const text = o[key];
  return typeof text === "string" ? Buffer.from(text, "utf8") : null;
}

// The checks. Each takes what JSON.parse gave and returns it typed, or
// throws a ProtocolError naming what is wrong.

type Json = Record<string, unknown>;

function show(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 200 ? `${s.slice(0, 200)}...` : s;
}

function object(v: unknown, what: string): Json {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new ProtocolError(`${what} is not a JSON object: ${show(v)}`);
  }
  return v as Json;
}

function want(o: Json, key: string, type: "string" | "number" | "boolean", what: string): void {
  if (typeof o[key] !== type) {
    throw new ProtocolError(`${what} without a ${type} "${key}": ${show(o)}`);
  }
}

function maybe(o: Json, key: string, type: "string" | "number" | "boolean", what: string): void {
  if (o[key] !== undefined && o[key] !== null && typeof o[key] !== type) {
    throw new ProtocolError(`${what} whose "${key}" is not a ${type}: ${show(o)}`);
  }
}

function list<T>(o: Json, key: string, what: string, each: (v: unknown) => T, optional = false): T[] {
  const v = o[key];
  if (v === undefined && optional) return [];
  if (!Array.isArray(v)) throw new ProtocolError(`${what} without a list "${key}": ${show(o)}`);
  return v.map(each);
}

/** A request, checked. */
export function readRequest(v: unknown): Request {
  const what = "a request";
  const o = object(v, what);
  for (const k of ["zone", "class", "op", "path", "cmdline", "time"]) want(o, k, "string", what);
  for (const k of ["id", "pid", "uid"]) want(o, k, "number", what);
  maybe(o, "timeout_secs", "number", what);
  if (o["timeout_secs"] === undefined) o["timeout_secs"] = 0;
  for (const k of ["target", "path_b64", "target_b64", "cmdline_b64"]) maybe(o, k, "string", what);
  maybe(o, "retry", "boolean", what);
  maybe(o, "waiting", "number", what);
  list(o, "items", what, (i) => {
    const item = object(i, "a request's item");
    for (const k of ["class", "zone", "path"]) want(item, k, "string", "a request's item");
    return item;
  });
  return o as unknown as Request;
}

/** A watch event, checked. */
export function readEvent(v: unknown): Event {
  const o = object(v, "an event");
  if (o["v"] !== PROTOCOL_VERSION) {
    throw new ProtocolError(`an event of another protocol version: ${show(o)}`);
  }
  switch (o["event"]) {
    case "request":
      readRequest(o["request"]);
      return o as unknown as RequestEvent;
    case "resolved":
      want(o, "id", "number", "a resolved event");
      want(o, "outcome", "string", "a resolved event");
      maybe(o, "scope", "string", "a resolved event");
      maybe(o, "approver_uid", "number", "a resolved event");
      maybe(o, "reason", "string", "a resolved event");
      return o as unknown as ResolvedEvent;
    case "lagged":
      want(o, "missed", "number", "a lagged event");
      return o as unknown as LaggedEvent;
    default:
      throw new ProtocolError(`an event the client doesn't know: ${show(o)}`);
  }
}

function readChange(v: unknown): Change {
  const what = "a change";
  const o = object(v, what);
  want(o, "path", "string", what);
  want(o, "kind", "string", what);
  for (const k of ["path_b64", "from", "from_b64", "file_type", "diff"]) maybe(o, k, "string", what);
  for (const k of ["size", "mode", "old_size", "old_mode", "entries"]) maybe(o, k, "number", what);
  for (const k of ["first", "last"]) {
    if (o[k] === undefined || o[k] === null) continue;
    const a = object(o[k], `a change's ${k} actor`);
    for (const n of ["pid", "uid"]) want(a, n, "number", `a change's ${k} actor`);
    want(a, "time", "string", `a change's ${k} actor`);
    for (const n of ["comm", "comm_b64", "argv", "argv_b64"]) maybe(a, n, "string", `a change's ${k} actor`);
  }
  return o as unknown as Change;
}

function readConflict(v: unknown): Conflict {
  const what = "a conflict";
  const o = object(v, what);
  want(o, "path", "string", what);
  want(o, "why", "string", what);
  for (const k of ["path_b64", "at", "at_b64"]) maybe(o, k, "string", what);
  return o as unknown as Conflict;
}

function zones<T>(answer: Json, what: string, each: (z: Json) => T): { zones: T[] } {
  return {
    zones: list(answer, "zones", what, (z) => {
      const o = object(z, `a zone of ${what}`);
      want(o, "zone", "string", `a zone of ${what}`);
      return each(o);
    }),
  };
}

/** A `changes` answer, checked. */
export function readChangesReport(answer: Json): ChangesReport {
  return zones(answer, "a changes answer", (o) => {
    want(o, "staged", "boolean", "a zone's changes");
    maybe(o, "incomplete", "boolean", "a zone's changes");
    maybe(o, "patch", "string", "a zone's changes");
    o["changes"] = list(o, "changes", "a zone's changes", readChange);
    return o as unknown as ZoneChanges;
  });
}

/** A `commit` answer, checked. */
export function readCommitReport(answer: Json): CommitReport {
  return zones(answer, "a commit answer", (o) => {
    o["applied"] = list(o, "applied", "a zone's commit", readChange);
    o["conflicts"] = list(o, "conflicts", "a zone's commit", readConflict);
    // Only a zone left alone carries an (empty) `discarded`.
    delete o["discarded"];
    return o as unknown as ZoneCommit;
  });
}

/** A `discard` answer, checked. */
export function readDiscardReport(answer: Json): DiscardReport {
  return zones(answer, "a discard answer", (o) => {
    o["discarded"] = list(o, "discarded", "a zone's discard", readChange);
    if (o["conflicts"] !== undefined) {
      o["conflicts"] = list(o, "conflicts", "a zone's discard", readConflict);
    }
    // Only a zone left alone carries an (empty) `applied`.
    delete o["applied"];
    return o as unknown as ZoneDiscard;
  });
}

/** A `checkpoint` or `checkpoints` answer, checked. */
export function readCheckpointsReport(answer: Json): CheckpointsReport {
  maybe(answer, "id", "number", "a checkpoints answer");
  const report = zones(answer, "a checkpoints answer", (o) => {
    maybe(o, "skipped", "string", "a zone's checkpoints");
    o["checkpoints"] = list(o, "checkpoints", "a zone's checkpoints", (c) => {
      const cp = object(c, "a checkpoint");
      want(cp, "id", "number", "a checkpoint");
      want(cp, "time", "string", "a checkpoint");
      maybe(cp, "label", "string", "a checkpoint");
      maybe(cp, "paths", "number", "a checkpoint");
      return cp as unknown as CheckpointInfo;
    });
    return o as unknown as ZoneCheckpoints;
  });
  return typeof answer["id"] === "number" ? { id: answer["id"], zones: report.zones } : report;
}

/** A `rewind` answer, checked. */
export function readRewindReport(answer: Json): RewindReport {
  return zones(answer, "a rewind answer", (o) => {
    want(o, "to", "number", "a zone's rewind");
    maybe(o, "left_alone", "string", "a zone's rewind");
    o["dropped"] = list(o, "dropped", "a zone's rewind", (d) => {
      if (typeof d !== "number") throw new ProtocolError(`a zone's rewind whose "dropped" holds ${show(d)}`);
      return d;
    });
    if (o["paths"] !== undefined) {
      o["paths"] = list(o, "paths", "a zone's rewind", (p) => {
        if (typeof p !== "string") throw new ProtocolError(`a zone's rewind whose "paths" holds ${show(p)}`);
        return p;
      });
    }
    return o as unknown as ZoneRewind;
  });
}

/** A `status` object, checked. */
export function readStatus(v: unknown): Status {
  const what = "a status";
  const o = object(v, what);
  for (const k of ["mountpoint", "control", "sandbox_mode"]) want(o, k, "string", what);
  for (const k of ["pid", "started", "approval_timeout_secs", "owner_uid"]) want(o, k, "number", what);
  want(o, "no_approvals", "boolean", what);
  maybe(o, "config", "string", what);
  maybe(o, "audit_log", "string", what);
  list(o, "workers", what, (w) => w);
  list(o, "zones", what, (z) => {
    const zone = object(z, "a status zone");
    want(zone, "name", "string", "a status zone");
    want(zone, "backing", "string", "a status zone");
    const policy = object(zone["policy"], "a status zone's policy");
    want(policy, "access", "string", "a zone's policy");
    object(policy["approval"], "a zone policy's approval");
    return zone;
  });
  list(o, "pending", what, readRequest);
  object(o["counters"], "a status's counters");
  o["recent_refusals"] = list(o, "recent_refusals", what, (r) => object(r, "a recent refusal"), true);
  return o as unknown as Status;
}
