// A supervisor in TypeScript: mount a directory as the zone `work` (rw;
// every write and delete asks), run a worker in it, allow what it asks for
// under one directory of the zone, deny everything else, then print what
// the worker changed.
//
//   cd clients/node && npm ci && npm run build
//   node dist/examples/supervisor.js --dir /tmp/task --allow-under out -- \
//       sh -c 'mkdir out; echo ok > out/a.txt; echo no > b.txt'
//
// prints where it mounted ("mounted /tmp/zonemount-..."), each decision
// ("allow write /work/out" for the mkdir, "allow write
// /work/out/a.txt", "deny  write /work/b.txt"), then the change report
// ("added out", "added out/a.txt"); /tmp/task then holds out/a.txt and no
// b.txt. A request is allowed when every path it names is the directory
// itself or inside it, compared byte for byte. The worker starts in /work,
// in a session of its own (a decision from the worker's own session is
// refused); a request nobody decides is denied after --timeout seconds
// (default 30). The supervisor exits with the worker's status, and always
// unmounts. Outside this repository, import from "zonemount".

import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

import { escape, exact, run } from "../src/index.js";
import type { Client, Request } from "../src/index.js";

interface Args {
  dir: string;
  allowUnder: string;
  timeout: string;
  cmd: string[];
}

function usage(why: string): never {
  process.stderr.write(
    `supervisor: ${why}\nusage: supervisor.js --dir DIR [--allow-under SUBDIR] [--timeout SECS] -- CMD [ARG...]\n`,
  );
  process.exit(2);
}

function parseArgs(argv: string[]): Args {
  const a: Partial<Args> = { allowUnder: "out", timeout: "30" };
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i];
    const value = (): string => argv[++i] ?? usage(`${arg} needs a value`);
    if (arg === "--") break;
    else if (arg === "--dir") a.dir = value();
    else if (arg === "--allow-under") a.allowUnder = value();
    else if (arg === "--timeout") a.timeout = value();
    else usage(`unknown argument ${JSON.stringify(arg)}`);
  }
  a.cmd = argv.slice(i + 1);
  if (a.dir === undefined) usage("--dir is required");
  if (a.cmd.length === 0) usage("no worker command after --");
  return a as Args;
}

/** Whether every path `r` names is `dir` or inside it (exact bytes). */
function under(r: Request, dir: Buffer): boolean {
  const inside = Buffer.concat([dir, Buffer.from("/")]);
  return r.items.every((item) => {
    const p = exact(item, "path") ?? Buffer.alloc(0);
    return p.equals(dir) || (p.length > inside.length && p.subarray(0, inside.length).equals(inside));
  });
}

/** Decide every request until the watch ends. */
async function decide(client: Client, watch: ReturnType<Client["watch"]>, dir: Buffer): Promise<void> {
  for await (const ev of watch) {
    if (ev.event !== "request") continue;
    const r = ev.request;
    // What the worker named is shown escaped: raw, it could redraw this terminal.
    const shown = escape(exact(r, "path") ?? "");
    try {
      if (under(r, dir)) {
        await client.allow(r.id, { scope: "once" });
        console.log(`allow ${r.class} ${shown}`);
      } else {
        await client.deny(r.id);
        console.log(`deny  ${r.class} ${shown}`);
      }
    } catch (e) {
      // Decided meanwhile (a timeout, a withdrawn call): say so, go on.
      console.log(`not decided ${r.class} ${shown}: ${(e as Error).message}`);
    }
  }
}

/** The worker's process group, and the signal that ended the supervisor. */
let workerPid: number | null = null;
let signalled: NodeJS.Signals | null = null;

/** Ctrl-C or a TERM stops the worker (its whole session) too; the mount's
 * own handler, which runs next, unmounts (lazily while the worker is
 * still in it). */
function stop(sig: NodeJS.Signals): void {
  signalled = sig;
  if (workerPid !== null) {
    try {
      process.kill(-workerPid, "SIGTERM");
    } catch {
      // already gone
    }
  }
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  // Before the mount's own handlers, so that the worker is stopped first.
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const dir = fs.realpathSync(args.dir);
  const conf = fs.mkdtempSync(path.join(os.tmpdir(), "supervisor-"));
  const config = path.join(conf, "project.yaml");
  fs.writeFileSync(
    config,
    "sandbox:\n  mode: direct\n  zones:\n" +
      `    - {name: work, path: ${JSON.stringify(dir)}, mode: rw, approval: {write: ask, delete: ask}}\n`,
  );
  const allowed = Buffer.from(path.posix.join("/work", args.allowUnder).replace(/\/+$/, ""), "utf8");
  try {
    return await run({ config, args: ["--approval-timeout", args.timeout] }, async (m) => {
      console.log(`mounted ${escape(m.mountpoint)}`);
      const watch = m.client.watch();
      await watch.ready();
      const deciding = decide(m.client, watch, allowed);
      const [cmd, ...cmdArgs] = args.cmd as [string, ...string[]];
      const worker = spawn(cmd, cmdArgs, {
        cwd: path.join(m.mountpoint, "work"),
        detached: true,
        stdio: ["ignore", "inherit", "inherit"],
      });
      workerPid = worker.pid ?? null;
      const code = await new Promise<number>((resolve) => {
        worker.on("error", (e) => {
          console.error(`supervisor: cannot run ${cmd}: ${e.message}`);
          resolve(127);
        });
        worker.on("exit", (c, sig) => resolve(c ?? 128 + (sig === null ? 0 : os.constants.signals[sig])));
      });
      watch.close();
      await deciding;
      console.log("changes:");
      for (const zone of (await m.client.changes()).zones) {
        for (const c of zone.changes) console.log(`  ${c.kind} ${escape(exact(c, "path") ?? "")}`);
      }
      return code;
    });
  } finally {
    fs.rmSync(conf, { recursive: true, force: true });
  }
}

const died = (): number | null => (signalled === null ? null : 128 + os.constants.signals[signalled]);

main().then(
  (code) => process.exit(died() ?? code),
  (e: unknown) => {
    console.error(`supervisor: ${(e as Error).message}`);
    process.exit(died() ?? 1);
  },
);
