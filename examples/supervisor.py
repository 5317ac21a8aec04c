#!/usr/bin/env python3
"""A supervisor in Python: run a worker under `zonemount run`, allow the
writes it asks for under one directory (the directory itself too), deny
every other request, and print what the task did (from the audit ledger)
when it ends.

    pip install --no-index ./clients/python
    python3 examples/supervisor.py --allow-under /workspace/out -- \\
        sh -c 'for i in 1 2 3; do mkdir -p out && break; sleep 0.5; done; echo no > b.txt; echo ok > out/a.txt'

The worker starts in the first rw zone (`/workspace` here): its `mkdir
out` and its write of `out/a.txt` are allowed, its write of `b.txt`
denied (the shell says why and goes on). (A mkdir that waits for a decision fails with EAGAIN at first and
goes through when retried once decided: docs/approvals.md.)

Without `--config`, the project is examples/supervisor.yaml in a fresh
temporary directory, removed at the end with everything the worker wrote
(`--keep DIR` keeps them in DIR instead, which must not exist yet). With
`--config F`, F's own zones are used and kept. A request waits at most
`--approval-timeout` seconds (10) and the worker runs at most `--timeout`
seconds (60). Its exit status is this script's exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import zonemount

HERE = Path(__file__).resolve().parent


def wait_for_socket(path: str, proc: "subprocess.Popen[bytes]", limit: float = 30.0) -> zonemount.Client:
    """The run's control socket, once its mount is live."""
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            sys.exit(f"supervisor: zonemount run ended before its mount was live (exit {proc.returncode})")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            sys.exit(f"supervisor: no control socket at {path} after {limit} s")
        # The socket file appears a moment before the daemon listens on it.
        if os.path.exists(path):
            client = zonemount.Client(path)
            try:
                client.requests()
                return client
            except zonemount.ZonemountError:
                client.close()
        time.sleep(0.05)


def shown(r: zonemount.Request) -> str:
    """A request's path and command line for people: escaped (the worker
    chose them; raw, they could redraw this terminal)."""
    return f"{zonemount.escape(r.path_bytes)} ({zonemount.escape(r.cmdline_bytes)})"


def field(rec: dict[str, Any], key: str) -> str:
    """A ledger record's name field, escaped."""
    return zonemount.escape(zonemount.exact(rec, key) or b"")


def decide(client: zonemount.Client, allow_under: str) -> None:
    """Allow requests whose every path is `allow_under` or inside it; deny
    the rest."""
    try:
        for ev in client.watch():
            if ev.kind != "request" or ev.request is None:
                continue
            r = ev.request
            if all(zonemount.is_under(i.path, allow_under) for i in r.items):
                client.allow(r.id, "once")
                print(f"supervisor: allowed {r.cls} {shown(r)}", file=sys.stderr)
            else:
                client.deny(r.id)
                print(f"supervisor: denied {r.cls} {shown(r)}", file=sys.stderr)
    except zonemount.ZonemountError:
        pass  # the mount went away: the task is over


def report(ledger: str) -> None:
    """What the task asked for and what was decided, from the ledger."""
    print("change report:")
    with open(ledger) as f:
        for line in f:
            rec = json.loads(line)
            ev = rec.get("event")
            if ev == "decision":
                print(f"  {rec['decision']:<5} {rec.get('class', '')} {field(rec, 'path')}")
            elif ev in ("mutation", "refusal", "timeout"):
                print(f"  {ev:<5} {rec.get('op', '')} {field(rec, 'path')} {rec.get('errno', '')}".rstrip())
            elif ev == "changes":
                # At unmount: what the task changed in each rw zone.
                print(f"  zone /{rec.get('zone', '')}: {rec.get('summary', '')}")
                exact = rec.get("paths_b64") or []
                for i, path in enumerate(rec.get("paths", [])):
                    b64 = exact[i] if i < len(exact) else None
                    print(f"    {zonemount.escape(zonemount.exact({'p': path, 'p_b64': b64}, 'p') or b'')}")


def supervise(config: str, a: argparse.Namespace, work: str) -> int:
    """Run the worker under `zonemount run` with `config`, deciding its
    requests; its exit status."""
    sock = os.path.join(work, "control.sock")
    ledger = os.path.join(work, "audit.jsonl")
    proc = subprocess.Popen(
        [zonemount.binary(), "run", "-q", "--config", config, "--control", sock,
         "--audit-log", ledger, "--approval-timeout", str(a.approval_timeout),
         "--timeout", str(a.timeout), "--", *a.cmd]
    )
    try:
        client = wait_for_socket(sock, proc)
        threading.Thread(target=decide, args=(client, a.allow_under), daemon=True).start()
        code = proc.wait()
    except BaseException:
        # `zonemount run` tears its mount down on SIGTERM.
        proc.terminate()
        proc.wait()
        raise
    report(ledger)
    return code


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--config", help="a project config (default: examples/supervisor.yaml in a temporary dir)")
    p.add_argument("--keep", metavar="DIR", help="without --config: keep the project and its zones in DIR")
    p.add_argument("--allow-under", default="/workspace/out", help="allow asks for this directory and inside it")
    p.add_argument("--approval-timeout", type=float, default=10, help="seconds a request may wait")
    p.add_argument("--timeout", type=float, default=60, help="seconds the worker may run")
    p.add_argument("cmd", nargs="+", help="the worker command")
    a = p.parse_args()
    if a.config is not None and a.keep is not None:
        p.error("--keep is for the example's own project; with --config the zones are the config's")
    with tempfile.TemporaryDirectory(prefix="supervisor-") as tmp:
        if a.config is not None:
            return supervise(a.config, a, tmp)
        project: Optional[str] = a.keep
        if project is None:
            project = os.path.join(tmp, "project")
        os.makedirs(project)
        config = os.path.join(project, "supervisor.yaml")
        shutil.copy(HERE / "supervisor.yaml", config)
        code = supervise(config, a, tmp)
        if a.keep is not None:
            print(f"supervisor: the zones are kept in {os.path.join(a.keep, '.sandbox-supervisor')}")
        return code


if __name__ == "__main__":
    sys.exit(main())
