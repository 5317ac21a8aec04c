#!/usr/bin/env python3
"""A supervisor in Python: run a worker under `zonemount run`, allow the
writes it asks for under one path, deny every other request, and print
what the task did (from the audit ledger) when it ends.

    pip install ./clients/python
    python3 examples/supervisor.py --config examples/supervisor.yaml \
        --allow-under /workspace/out/ -- sh -c 'echo ok > out/a.txt; echo no > b.txt'

The worker starts in the first rw zone (`/workspace` here). Its exit
status is this script's exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import zonemount


def wait_for_socket(path: str, proc: "subprocess.Popen[bytes]", limit: float = 30.0) -> zonemount.Client:
    """The run's control socket, once its mount is live."""
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            sys.exit(f"supervisor: zonemount run ended before its mount was live (exit {proc.returncode})")
        if time.monotonic() > deadline:
            proc.kill()
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


def field(rec: dict, key: str) -> str:
    """A ledger record's name field, escaped."""
    return zonemount.escape(zonemount.exact(rec, key) or b"")


def decide(client: zonemount.Client, allow_under: str) -> None:
    """Allow requests whose every path is under `allow_under`; deny the rest."""
    try:
        for ev in client.watch():
            if ev.kind != "request" or ev.request is None:
                continue
            r = ev.request
            if all(i.path.startswith(allow_under) for i in r.items):
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--config", required=True, help="the project config")
    p.add_argument("--allow-under", default="/workspace/out/", help="allow asks under this path")
    p.add_argument("cmd", nargs="+", help="the worker command")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="supervisor-") as d:
        sock = os.path.join(d, "control.sock")
        ledger = os.path.join(d, "audit.jsonl")
        proc = subprocess.Popen(
            [zonemount.binary(), "run", "-q", "--config", a.config, "--control", sock,
             "--audit-log", ledger, "--", *a.cmd]
        )
        client = wait_for_socket(sock, proc)
        threading.Thread(target=decide, args=(client, a.allow_under), daemon=True).start()
        code = proc.wait()
        report(ledger)
        return code


if __name__ == "__main__":
    sys.exit(main())
