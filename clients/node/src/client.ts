/**
 * The control socket's client: protocol v1, JSON Lines over a Unix socket.
 *
 * Each request is one JSON object with `"v": 1` and an `op`; each answer is
 * one object with `"v"` and `"ok"` (and `"error"`, one line, when `ok` is
 * false). `watch` answers once, then streams one event per line until the
 * connection closes. Each call here is a connection of its own, so calls
 * may run concurrently.
 */

import * as net from "node:net";

import { ProtocolError, RefusedError, ZonemountError } from "./errors.js";
import { controlSocket } from "./registry.js";
import {
  PROTOCOL_VERSION,
  readChangesReport,
  readCheckpointsReport,
  readCommitReport,
  readDiscardReport,
  readEvent,
  readRequest,
  readRewindReport,
  readStatus,
} from "./types.js";
import type {
  ChangesReport,
  CheckpointsReport,
  CommitReport,
  DiscardReport,
  Event,
  Request,
  RewindReport,
  Scope,
  Status,
} from "./types.js";

/** A path as a worker sees it (`/zone/...`): text, or exact bytes (a
 * name that is not UTF-8). */
export type PathArg = string | Uint8Array;

export interface ClientOptions {
  /** How long a `status`, `requests`, `allow` or `deny` may take, in
   * milliseconds (default 30000). `changes`, `commit` and `discard` wait
   * as long as they take (a commit copies files) unless their own
   * `timeoutMs` says otherwise; `watch` waits for ever. */
  timeoutMs?: number;
}

/** One line read at a time from a socket; `null` at its end. */
class Lines {
  private chunks: Buffer[] = [];
  /** How many of `chunks` hold no newline. */
  private scanned = 0;
  private ended = false;
  private failure: Error | null = null;
  private waiter: (() => void) | null = null;

  constructor(private readonly sock: net.Socket) {
    sock.on("data", (d: Buffer) => {
      this.chunks.push(d);
      this.wake();
    });
    sock.on("end", () => {
      this.ended = true;
      this.wake();
    });
    sock.on("close", () => {
      this.ended = true;
      this.wake();
    });
    sock.on("error", (e: Error) => {
      this.failure = e;
      this.wake();
    });
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  /** The next line without its newline, or null once the peer closed.
   * Each chunk is searched once, and a line copied once, however long it
   * is (a status or a diff can be megabytes). */
  async next(): Promise<Buffer | null> {
    for (;;) {
      for (; this.scanned < this.chunks.length; this.scanned++) {
        const c = this.chunks[this.scanned]!;
        const nl = c.indexOf(0x0a);
        if (nl < 0) continue;
        const head = this.chunks.slice(0, this.scanned);
        head.push(c.subarray(0, nl));
        const rest = c.subarray(nl + 1);
        const after = this.chunks.slice(this.scanned + 1);
        this.chunks = rest.length > 0 ? [rest, ...after] : after;
        this.scanned = 0;
        return Buffer.concat(head);
      }
      if (this.failure !== null) throw this.failure;
      if (this.ended) {
        // A last line without its newline still counts.
        const last = Buffer.concat(this.chunks);
        this.chunks = [];
        this.scanned = 0;
        return last.length > 0 ? last : null;
      }
      await new Promise<void>((resolve) => {
        this.waiter = resolve;
      });
    }
  }
}

function line(obj: Record<string, unknown>): string {
  return `${JSON.stringify({ v: PROTOCOL_VERSION, ...obj })}\n`;
}

function parse(buf: Buffer): unknown {
  try {
    return JSON.parse(buf.toString("utf8"));
  } catch {
    throw new ProtocolError(`not a JSON line from the daemon: ${JSON.stringify(buf.subarray(0, 200).toString("utf8"))}`);
  }
}

/** Check one answer line: JSON, our version, ok; else throw with the
 * daemon's message. */
function answer(buf: Buffer | null): Record<string, unknown> {
  if (buf === null) throw new ZonemountError("the daemon closed the control connection");
  const ans = parse(buf);
  if (typeof ans !== "object" || ans === null || Array.isArray(ans)) {
    throw new ProtocolError(`not a JSON object from the daemon: ${JSON.stringify(ans)}`);
  }
  const o = ans as Record<string, unknown>;
  if (o["v"] !== PROTOCOL_VERSION) {
    throw new ProtocolError(
      `the daemon speaks control protocol version ${JSON.stringify(o["v"])}, this client ` +
        `version ${PROTOCOL_VERSION}: use the client that came with the zonemount binary`,
    );
  }
  if (o["ok"] !== true) {
    const err = o["error"];
    throw new RefusedError(typeof err === "string" ? err : "the daemon refused without a message");
  }
  return o;
}

/** A connection's socket and lines, once connected. */
function connect(socketPath: string): Promise<{ sock: net.Socket; lines: Lines }> {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ path: socketPath });
    const failed = (e: NodeJS.ErrnoException): void => {
      sock.destroy();
      reject(new ZonemountError(`cannot reach the control socket ${socketPath}: ${e.code ?? e.message}`, { cause: e }));
    };
    sock.once("error", failed);
    sock.once("connect", () => {
      sock.off("error", failed);
      resolve({ sock, lines: new Lines(sock) });
    });
  });
}

/**
 * A connection to one mount's control socket.
 *
 * `Client.forMount(mountpoint)` finds the socket in the registry;
 * `new Client(socketPath)` takes a known one (`--control SOCK`). Every
 * answer's protocol version is checked.
 */
export class Client {
  readonly socketPath: string;
  readonly timeoutMs: number;

  constructor(socketPath: string, options: ClientOptions = {}) {
    this.socketPath = socketPath;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** The client of the mount at `mountpoint` (found in the registry, as
   * `zonemount status` finds it). */
  static forMount(mountpoint: string, options: ClientOptions = {}): Client {
    return new Client(controlSocket(mountpoint), options);
  }

  /** One request, one answer, on a connection of its own. `timeoutMs`
   * null: no limit. */
  private async call(obj: Record<string, unknown>, timeoutMs: number | null): Promise<Record<string, unknown>> {
    const { sock, lines } = await connect(this.socketPath);
    let timer: NodeJS.Timeout | undefined;
    try {
      const got = lines.next();
      sock.write(line(obj));
      if (timeoutMs === null) return answer(await got);
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(new ZonemountError(`no answer to ${String(obj["op"])} from ${this.socketPath} within ${timeoutMs / 1000} s`));
        }, timeoutMs);
      });
      return answer(await Promise.race([got, late]));
    } catch (e) {
      if (e instanceof ZonemountError) throw e;
      throw new ZonemountError(`control connection failed: ${(e as Error).message}`, { cause: e });
    } finally {
      clearTimeout(timer);
      sock.destroy();
    }
  }

  /** The mount's status: zones, settings, pending requests, counters. */
  async status(): Promise<Status> {
    const a = await this.call({ op: "status" }, this.timeoutMs);
    return readStatus(a["status"]);
  }

  /** The requests waiting for a decision now. */
  async requests(): Promise<Request[]> {
    const a = await this.call({ op: "list" }, this.timeoutMs);
    const reqs = a["requests"];
    if (!Array.isArray(reqs)) throw new ProtocolError("a list answer without its requests");
    return reqs.map(readRequest);
  }

  /** Allow request `id` (`scope` `once` by default); a `path` or `zone`
   * scope also settles the waiting requests it covers, and later ones. */
  async allow(id: number, options: { scope?: Scope } = {}): Promise<void> {
    const scope = options.scope ?? "once";
    if (scope !== "once" && scope !== "path" && scope !== "zone") {
      throw new TypeError(`scope must be once, path or zone, not ${JSON.stringify(scope)}`);
    }
    checkId(id);
    await this.call({ op: "decide", id, decision: "allow", scope }, this.timeoutMs);
  }

  /** Deny request `id`: the syscall gets EACCES, and the same class on
   * the same path is refused at once from then on. */
  async deny(id: number): Promise<void> {
    checkId(id);
    await this.call({ op: "decide", id, decision: "deny" }, this.timeoutMs);
  }

  /** Each rw zone's change report; `paths` (as a worker sees them,
   * `/zone/...`) limit it; `diff` adds unified diffs of staged text
   * files. `since` (a checkpoint's id): what differs between that
   * checkpoint's view and the zone now; `between` ([older, newer]): between
   * two checkpoints' views (staged zones that have them). */
  async changes(
    options: {
      paths?: PathArg[];
      diff?: boolean;
      patch?: boolean;
      since?: number;
      between?: [number, number];
      timeoutMs?: number;
    } = {},
  ): Promise<ChangesReport> {
    const span: Record<string, unknown> = {};
    if (options.patch) span["patch"] = true;
    if (options.since !== undefined) span["since"] = checkId(options.since);
    if (options.between !== undefined) span["between"] = options.between.map(checkId);
    const a = await this.call(
      { op: "changes", ...paths(options.paths), diff: options.diff ?? false, ...span },
      options.timeoutMs ?? null,
    );
    return readChangesReport(a);
  }

  /** Apply the staged changes (under `paths`) to the backing dirs; with
   * `upto` (a checkpoint's id), what the zones showed at that checkpoint
   * (the later changes stay staged). A path the host changed meanwhile is
   * left staged as a conflict unless `force`: check each zone's
   * `conflicts`. */
  async commit(
    options: { paths?: PathArg[]; force?: boolean; upto?: number; timeoutMs?: number } = {},
  ): Promise<CommitReport> {
    const upto = options.upto === undefined ? {} : { upto: checkId(options.upto) };
    const a = await this.call(
      { op: "commit", ...paths(options.paths), force: options.force ?? false, ...upto },
      options.timeoutMs ?? null,
    );
    return readCommitReport(a);
  }

  /** Take a checkpoint of the staged zones (`paths`: `/zone` of the ones
   * to take it of; none: all): one id for all of them, `report.id`. */
  async checkpoint(options: { paths?: PathArg[]; label?: string; timeoutMs?: number } = {}): Promise<CheckpointsReport> {
    const label = options.label === undefined ? {} : { label: options.label };
    const a = await this.call({ op: "checkpoint", ...paths(options.paths), ...label }, options.timeoutMs ?? null);
    return readCheckpointsReport(a);
  }

  /** Each staged zone's checkpoints (`paths`: `/zone` of the ones to
   * list), oldest first. */
  async checkpoints(options: { paths?: PathArg[]; timeoutMs?: number } = {}): Promise<CheckpointsReport> {
    const a = await this.call({ op: "checkpoints", ...paths(options.paths) }, options.timeoutMs ?? null);
    return readCheckpointsReport(a);
  }

  /** Make each staged zone that has checkpoint `id` show what it showed
   * then (the checkpoints after it and every later change are dropped);
   * with `paths` (as a worker sees them), only those paths, keeping every
   * checkpoint. A zone with files open for writing is left alone
   * (`left_alone` says why). */
  async rewind(id: number, options: { paths?: PathArg[]; timeoutMs?: number } = {}): Promise<RewindReport> {
    const a = await this.call({ op: "rewind", id: checkId(id), ...paths(options.paths) }, options.timeoutMs ?? null);
    return readRewindReport(a);
  }

  /** Drop the staged changes (under `paths`); the mount shows the backing
   * dirs' files again. `discarded` lists what was dropped; `conflicts`,
   * why a zone was left alone. */
  async discard(options: { paths?: PathArg[]; timeoutMs?: number } = {}): Promise<DiscardReport> {
    const a = await this.call({ op: "discard", ...paths(options.paths) }, options.timeoutMs ?? null);
    return readDiscardReport(a);
  }

  /** Every waiting request, then each new request and each end, as they
   * happen, until the mount goes away or {@link Watch.close} (or a
   * `break` out of `for await`). */
  watch(): Watch {
    return new Watch(this.socketPath);
  }
}

/** `id` (a request's or a checkpoint's), checked. */
function checkId(id: number): number {
  if (!Number.isSafeInteger(id) || id < 0) {
    throw new TypeError(`an id is a non-negative integer, not ${String(id)}`);
  }
  return id;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const lossyUtf8 = new TextDecoder("utf-8");

/** A request's `paths` (and `paths_b64` beside them when one is not
 * UTF-8). */
function paths(ps: PathArg[] = []): { paths: string[]; paths_b64?: Array<string | null> } {
  const text: string[] = [];
  const b64: Array<string | null> = [];
  for (const p of ps) {
    if (typeof p === "string") {
      text.push(p);
      b64.push(null);
      continue;
    }
    try {
      text.push(strictUtf8.decode(p));
      b64.push(null);
    } catch {
      text.push(lossyUtf8.decode(p));
      b64.push(Buffer.from(p).toString("base64"));
    }
  }
  return b64.some((b) => b !== null) ? { paths: text, paths_b64: b64 } : { paths: text };
}

/**
 * A `watch` stream: an async iterator of {@link Event}s. It ends when the
 * mount goes away or on {@link Watch.close}; an error (the daemon refused,
 * a line that isn't the protocol) is thrown from the iteration.
 */
export class Watch implements AsyncIterableIterator<Event> {
  private readonly conn: Promise<{ sock: net.Socket; lines: Lines }>;
  private started: Promise<void> | null = null;
  private closed = false;
  private sock: net.Socket | null = null;
  /** The last `next()`: each waits for the one before (one reader). */
  private turn: Promise<unknown> = Promise.resolve();

  constructor(readonly socketPath: string) {
    this.conn = connect(socketPath).then((c) => {
      if (this.closed) c.sock.destroy();
      this.sock = c.sock;
      return c;
    });
    // An unreachable socket is thrown from the first next().
    this.conn.catch(() => undefined);
  }

  /** Resolves once the daemon accepted the watch: from then on no request
   * nor end is missed. */
  ready(): Promise<void> {
    this.started ??= this.conn.then(async ({ sock, lines }) => {
      const got = lines.next();
      sock.write(line({ op: "watch" }));
      answer(await got);
    });
    return this.started;
  }

  /** The next event; calls made before one resolves are answered in
   * order. */
  next(): Promise<IteratorResult<Event, undefined>> {
    const mine = this.turn.then(() => this.read());
    this.turn = mine.catch(() => undefined);
    return mine;
  }

  private async read(): Promise<IteratorResult<Event, undefined>> {
    if (this.closed) return { done: true, value: undefined };
    try {
      await this.ready();
      const { lines } = await this.conn;
      for (;;) {
        const l = await lines.next();
        if (l === null || this.closed) {
          this.close();
          return { done: true, value: undefined };
        }
        if (l.toString("utf8").trim() === "") continue;
        return { done: false, value: readEvent(parse(l)) };
      }
    } catch (e) {
      const wasClosed = this.closed;
      this.close();
      if (wasClosed) return { done: true, value: undefined };
      if (e instanceof ZonemountError) throw e;
      throw new ZonemountError(`watch connection failed: ${(e as Error).message}`, { cause: e });
    }
  }

  async return(): Promise<IteratorResult<Event, undefined>> {
    this.close();
    return { done: true, value: undefined };
  }

  /** Stop watching: a pending `next()` ends the iteration. */
  close(): void {
    this.closed = true;
    this.sock?.destroy();
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
