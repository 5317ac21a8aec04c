/**
 * A client for zonemount: find a mount's control socket, read its status,
 * watch and decide its approval requests, review, commit and discard its
 * staged changes, and run mounts that are always unmounted.
 *
 * ```ts
 * import { run } from "zonemount";
 * await run({ config: "project.yaml" }, async (m) => {
 *   for await (const ev of m.client.watch()) {
 *     if (ev.event === "request") await m.client.allow(ev.request.id, { scope: "path" });
 *   }
 * });
 * ```
 */

export { Client, Watch } from "./client.js";
export type { ClientOptions, PathArg } from "./client.js";
export { CommandError, NotMountedError, ProtocolError, RefusedError, ZonemountError } from "./errors.js";
export { escape } from "./escape.js";
export { Mount, binary, mount, run, runCli } from "./mount.js";
export type { MountOptions, RunCliOptions } from "./mount.js";
export { ROOT_RUNTIME_DIR, controlSocket, findRecord, mountKey, runtimeDir } from "./registry.js";
export type { MountRecord } from "./registry.js";
export { PROTOCOL_VERSION, exact } from "./types.js";
export type {
  ApprovalRule,
  Actor,
  Change,
  ChangesReport,
  CheckpointInfo,
  CheckpointsReport,
  CommitReport,
  Conflict,
  DiscardReport,
  Event,
  Item,
  LaggedEvent,
  Outcome,
  PolicyStatus,
  RecentRefusal,
  Request,
  RequestEvent,
  ResolvedEvent,
  RewindReport,
  Scope,
  Status,
  WorkerBoundary,
  ZoneChanges,
  ZoneCommit,
  ZoneCheckpoints,
  ZoneDiscard,
  ZoneRewind,
  ZoneStatus,
} from "./types.js";
