/**
 * The errors the client throws. Each carries one line: the daemon's own
 * message when the daemon answered, the command's when `zonemount` ran.
 */

/** Something zonemount refused or failed. */
export class ZonemountError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ZonemountError";
  }
}

/** The daemon answered `"ok": false`: `message` is its `error` line. */
export class RefusedError extends ZonemountError {
  constructor(message: string) {
    super(message);
    this.name = "RefusedError";
  }
}

/** No zonemount mount is recorded at that path for this user. */
export class NotMountedError extends ZonemountError {
  constructor(message: string) {
    super(message);
    this.name = "NotMountedError";
  }
}

/** The daemon speaks another protocol version, or sent something that
 * isn't the protocol. */
export class ProtocolError extends ZonemountError {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

/** The `zonemount` binary exited non-zero (or was killed): `exitCode` is
 * its exit status (the README's exit-status table), null when a signal
 * ended it; `message` is the first line it wrote to stderr. */
export class CommandError extends ZonemountError {
  readonly exitCode: number | null;
  readonly stderr: string;
  constructor(message: string, exitCode: number | null, stderr: string) {
    super(message);
    this.name = "CommandError";
    this.exitCode = exitCode;
    this.stderr = stderr;
  }
}
