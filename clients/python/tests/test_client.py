"""The Python client against real mounts."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

import zonemount
from conftest import is_mounted, wait_for, worker


def test_mount_status_and_unmount(project: Path, zm_bin: str) -> None:
    with zonemount.mount(project / "mnt", config=project / "project.yaml") as m:
        assert is_mounted(project / "mnt")
        assert (m.mountpoint / "data/readme.txt").read_text() == "hello\n"
        st = m.client.status()
        assert isinstance(st, zonemount.Status)
        assert st.mountpoint == str(m.mountpoint)
        assert [z.name for z in st.zones] == ["data", "final"]
        assert st.zones[1].policy.approval == zonemount.ApprovalPolicy(write="ask", delete="ask")
        assert st.pending == ()
        assert m.client.requests() == []
    assert not is_mounted(project / "mnt")


def test_a_fresh_temporary_mountpoint_is_made_and_removed(project: Path, zm_bin: str) -> None:
    with zonemount.mount(config=project / "project.yaml") as m:
        mp = m.mountpoint
        assert is_mounted(mp)
    assert not is_mounted(mp)
    assert not mp.exists()


def test_allow_lets_the_waiting_write_finish(mounted: zonemount.Mount, project: Path) -> None:
    c = mounted.client
    w = worker("echo hi > final/report.md", mounted.mountpoint)
    reqs = wait_for("a pending request", c.requests)
    r = reqs[0]
    assert (r.zone, r.cls, r.op, r.path) == ("final", "write", "create", "/final/report.md")
    assert r.pid > 0 and r.uid == os.geteuid()
    assert r.items[0] == zonemount.Item(cls="write", zone="final", path="/final/report.md")
    c.allow(r.id, "path")
    assert w.wait(timeout=20) == 0, w.stderr.read() if w.stderr else ""
    assert (project / "final/report.md").read_text() == "hi\n"
    # The path scope covers the next write of the same file.
    w = worker("echo again >> final/report.md", mounted.mountpoint)
    assert w.wait(timeout=20) == 0
    assert c.requests() == []


def test_deny_refuses_the_syscall(mounted: zonemount.Mount, project: Path) -> None:
    c = mounted.client
    # coreutils echo names the errno (the write waits, then fails).
    w = worker("/bin/echo hi > final/secret.md", mounted.mountpoint)
    r = wait_for("a pending request", c.requests)[0]
    c.deny(r.id)
    assert w.wait(timeout=20) != 0
    assert w.stderr is not None and "Permission denied" in w.stderr.read()
    assert not (project / "final/secret.md").exists()


def test_a_name_that_is_not_utf8_comes_exact(mounted: zonemount.Mount, project: Path) -> None:
    c = mounted.client
    w = worker("echo hi > \"final/$(printf 'a\\033\\377.md')\"", mounted.mountpoint)
    r = wait_for("a pending request", c.requests)[0]
    assert r.path == "/final/a\x1b\ufffd.md"
    assert r.path_bytes == b"/final/a\x1b\xff.md"
    assert r.cmdline_bytes.startswith(b"sh -c ")
    assert r.target_bytes is None
    assert r.items[0].path_bytes == b"/final/a\x1b\xff.md"
    # Shown to people as the binary shows it.
    shown = zonemount.escape(r.path_bytes)
    assert shown == "/final/a\\x1b\\xff.md"
    assert shown in zonemount.run_cli(["approvals", "list", str(mounted.mountpoint)])
    assert zonemount.escape(os.fsdecode(b"\xe2\x80\xae\\")) == "\\u{202e}\\\\"
    c.allow(r.id)
    assert w.wait(timeout=20) == 0
    assert os.listdir(os.fsencode(project / "final")) == [b"a\x1b\xff.md"]


def test_errors_carry_the_daemons_message(mounted: zonemount.Mount, project: Path) -> None:
    with pytest.raises(zonemount.ZonemountError, match="no pending request 424242"):
        mounted.client.allow(424242)
    with pytest.raises(ValueError):
        mounted.client.allow(1, "forever")  # type: ignore[arg-type]
    with pytest.raises(zonemount.NotMountedError):
        zonemount.Client.for_mount(project / "data")


def test_a_bad_config_is_a_command_error_with_exit_2(project: Path, zm_bin: str) -> None:
    bad = project / "bad.yaml"
    bad.write_text("sandbox:\n  zones: 3\n")
    with pytest.raises(zonemount.CommandError) as e:
        with zonemount.mount(project / "mnt", config=bad):
            pass
    assert e.value.returncode == 2
    assert "bad.yaml" in str(e.value)
    assert not is_mounted(project / "mnt")


def test_watch_streams_requests_and_their_ends(mounted: zonemount.Mount) -> None:
    c = mounted.client
    events: list[zonemount.Event] = []
    done = threading.Event()

    def watcher() -> None:
        for ev in c.watch():
            events.append(ev)
            if ev.kind == "request" and ev.request is not None:
                c.deny(ev.request.id)
            if ev.kind == "resolved":
                done.set()
                return

    t = threading.Thread(target=watcher, daemon=True)
    t.start()
    w = worker("echo hi > final/watched.md", mounted.mountpoint)
    assert done.wait(timeout=20), f"events so far: {events}"
    assert w.wait(timeout=20) != 0
    kinds = [e.kind for e in events]
    assert kinds == ["request", "resolved"], events
    assert events[1].outcome == "deny"
    assert events[1].approver_uid == os.geteuid()
    assert events[0].request is not None and events[1].id == events[0].request.id


def test_awatch_is_the_same_for_asyncio(mounted: zonemount.Mount) -> None:
    c = mounted.client

    async def main() -> list[zonemount.Event]:
        seen: list[zonemount.Event] = []
        w = worker("echo hi > final/async.md", mounted.mountpoint)
        async for ev in c.awatch():
            seen.append(ev)
            if ev.kind == "request" and ev.request is not None:
                c.allow(ev.request.id)
            if ev.kind == "resolved":
                break
        assert w.wait(timeout=20) == 0
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), timeout=30))
    assert [e.kind for e in seen] == ["request", "resolved"]
    assert seen[1].outcome == "allow"


def test_another_protocol_version_is_refused_on_connect(tmp_path: Path) -> None:
    path = tmp_path / "fake.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b'{"v":2,"ok":true,"requests":[]}\n')

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with pytest.raises(zonemount.ProtocolError, match="version 2"):
        zonemount.Client(path).requests()
    t.join(timeout=5)
    srv.close()


def docstring_command() -> list[str]:
    """The command examples/supervisor.py's docstring shows, as argv."""
    import ast
    import shlex

    from conftest import REPO

    doc = ast.get_docstring(ast.parse((REPO / "examples/supervisor.py").read_text())) or ""
    lines = doc.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("python3 examples/supervisor.py"))
    text = ""
    for line in lines[i:]:
        text += line.strip().removesuffix("\\")
        if not line.rstrip().endswith("\\"):
            break
    argv = shlex.split(text)
    assert argv[:2] == ["python3", "examples/supervisor.py"], argv
    return argv[2:]


def run_example(args: list[str], cwd: Path, tmp: Path, zm_bin: str) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys

    from conftest import REPO

    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "LC_ALL": "C",
           "PATH": f"{Path(zm_bin).parent}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [sys.executable, str(REPO / "examples/supervisor.py"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, env=env,
    )


def test_the_example_supervisor_does_what_its_docstring_says(tmp_path: Path, zm_bin: str) -> None:
    from conftest import REPO

    left_before = (REPO / "examples/.sandbox-supervisor").exists()
    work = tmp_path / "cwd"
    work.mkdir()
    done = run_example(docstring_command(), work, tmp_path / "tmp", zm_bin)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ["allow write /workspace/out\n", "allow write /workspace/out/a.txt\n",
                 "deny  write /workspace/b.txt\n", "added /workspace/out\n",
                 "added /workspace/out/a.txt\n"]:
        assert line in done.stdout, done.stdout + done.stderr
    assert "added /workspace/b.txt" not in done.stdout
    assert "supervisor: denied write /workspace/b.txt" in done.stderr
    # It cleans up after itself: nothing in its cwd, its temp dir or the repo.
    assert list(work.iterdir()) == []
    assert list((tmp_path / "tmp").iterdir()) == []
    assert (REPO / "examples/.sandbox-supervisor").exists() == left_before


def test_the_example_supervisor_keeps_the_zones_when_asked(tmp_path: Path, zm_bin: str) -> None:
    keep = tmp_path / "kept"
    done = run_example(["--keep", str(keep), *docstring_command()], tmp_path, tmp_path / "tmp", zm_bin)
    assert done.returncode == 0, done.stdout + done.stderr
    ws = keep / ".sandbox-supervisor/workspace"
    assert (ws / "out/a.txt").read_text() == "ok\n"
    assert not (ws / "b.txt").exists()
    assert f"the zones are kept in {keep / '.sandbox-supervisor'}" in done.stdout


def test_the_example_supervisor_with_a_config_and_a_worker_that_fails(tmp_path: Path, zm_bin: str) -> None:
    import shutil

    from conftest import REPO

    shutil.copy(REPO / "examples/supervisor.yaml", tmp_path / "supervisor.yaml")
    done = run_example(
        ["--config", "supervisor.yaml", "--allow-under", "/workspace/out/", "--",
         "sh", "-c", "mkdir out || { sleep 1; mkdir out; }; echo ok > out/a.txt; echo no > outside.txt; exit 3"],
        tmp_path, tmp_path / "tmp", zm_bin,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    backing = tmp_path / ".sandbox-supervisor/workspace"
    assert (backing / "out/a.txt").read_text() == "ok\n"
    assert not (backing / "outside.txt").exists(), "/workspace/outside is not under /workspace/out/"
    assert "deny  write /workspace/outside.txt" in done.stdout, done.stdout


def test_is_under_matches_the_directory_and_what_is_inside_it() -> None:
    for d in ("/workspace/out", "/workspace/out/"):
        assert zonemount.is_under("/workspace/out", d)
        assert zonemount.is_under("/workspace/out/a/b.txt", d)
        assert not zonemount.is_under("/workspace/outside", d)
        assert not zonemount.is_under("/workspace", d)
        assert not zonemount.is_under("/workspace/out/../b.txt", d)
    assert not zonemount.is_under("/anything", "/")


def test_zones_on_the_command_line(project: Path, zm_bin: str) -> None:
    with zonemount.mount(
        project / "mnt", zones=[f"out={project / 'final'}:rw", f"in={project / 'data'}"]
    ) as m:
        st = m.client.status()
        assert [z.name for z in st.zones] == ["out", "in"]
        assert st.zone_args == (f"out={project / 'final'}:rw", f"in={project / 'data'}")
        (m.mountpoint / "out/new.txt").write_text("x")
        with pytest.raises(OSError):
            (m.mountpoint / "in/new.txt").write_text("x")
    assert (project / "final/new.txt").read_text() == "x"


def test_a_staged_zone_is_reviewed_then_committed_or_discarded(project: Path, zm_bin: str) -> None:
    final = project / "final"
    (final / "keep.txt").write_text("old\n")
    with zonemount.mount(
        project / "mnt",
        zones=[f"out={final}:staged"],
        args=["--stage-dir", str(project / "stage")],
    ) as m:
        # The worker's writes: in a session of its own (a commit from the
        # writer's own session is refused).
        subprocess.run(
            ["setsid", "-w", "sh", "-c", "echo new > new.txt && echo more >> keep.txt && echo x > drop.txt"],
            cwd=m.mountpoint / "out",
            check=True,
        )
        assert not (final / "new.txt").exists(), "nothing reaches the backing dir"
        report = m.client.changes(diff=True)
        assert [(z.zone, z.staged) for z in report] == [("out", True)]
        got = {c.path: c.kind for c in report[0].changes}
        assert got == {"new.txt": "added", "keep.txt": "modified", "drop.txt": "added"}, got
        keep = next(c for c in report[0].changes if c.path == "keep.txt")
        assert keep.diff is not None and "+more" in keep.diff, keep.diff
        dropped = m.client.discard(["/out/drop.txt"])
        assert [c.path for c in dropped[0].applied] == ["drop.txt"]
        assert not (m.mountpoint / "out/drop.txt").exists()
        done = m.client.commit()
        assert done[0].conflicts == []
        assert sorted(c.path for c in done[0].applied) == ["keep.txt", "new.txt"]
    assert (final / "new.txt").read_text() == "new\n"
    assert (final / "keep.txt").read_text() == "old\nmore\n"
    assert not (final / "drop.txt").exists()


def test_checkpoints_and_rewind_of_a_staged_zone(project: Path, zm_bin: str) -> None:
    final = project / "final"
    (final / "keep.txt").write_text("old\n")
    with zonemount.mount(
        project / "mnt",
        zones=[f"out={final}:staged"],
        args=["--stage-dir", str(project / "stage")],
    ) as m:
        work = m.mountpoint / "out"
        subprocess.run(["setsid", "-w", "sh", "-c", "echo one > keep.txt"], cwd=work, check=True)
        first = m.client.checkpoint(label="one")
        subprocess.run(
            ["setsid", "-w", "sh", "-c", "echo two > keep.txt && echo n > new.txt"],
            cwd=work,
            check=True,
        )
        second = m.client.checkpoint(["/out"])
        assert second > first
        listed = m.client.checkpoints()
        assert [(z.zone, [c.id for c in z.checkpoints]) for z in listed] == [
            ("out", [first, second])
        ]
        assert listed[0].checkpoints[0].label == "one"
        assert [c.paths for c in listed[0].checkpoints] == [1, 2]
        since = m.client.changes(since=first)
        assert sorted((c.path, c.kind) for c in since[0].changes) == [
            ("keep.txt", "modified"),
            ("new.txt", "added"),
        ]
        between = m.client.changes(between=(first, second), diff=True)
        keep = next(c for c in between[0].changes if c.path == "keep.txt")
        assert keep.diff is not None and "-one" in keep.diff and "+two" in keep.diff
        some = m.client.rewind(first, ["/out/keep.txt"])
        assert some[0].paths == ("keep.txt",) and some[0].left_alone is None
        assert (work / "keep.txt").read_text() == "one\n"
        assert (work / "new.txt").exists()
        whole = m.client.rewind(first)
        assert whole[0].dropped == (second,)
        assert not (work / "new.txt").exists()
        done = m.client.commit(upto=first)
        assert [c.path for c in done[0].applied] == ["keep.txt"]
    assert (final / "keep.txt").read_text() == "one\n"
