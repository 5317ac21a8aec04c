"""The typed status, ``check()`` and ``run()`` against real mounts."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import zonemount
from conftest import is_mounted


def fields(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - {"raw", "path_bytes"}


def test_status_is_typed_and_covers_every_field_on_the_wire(tmp_path: Path, zm_bin: str) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "mnt").mkdir()
    (tmp_path / "p.yaml").write_text(
        "sandbox:\n"
        "  mode: direct\n"
        "  zones:\n"
        "    w:\n"
        "      path: ./w\n"
        "      mode: rw\n"
        "      suffixes: [.md]\n"
        "      max_file_bytes: 1000\n"
        "      protect: [.git]\n"
        "      hide: ['*.pem']\n"
        "      ask_read: ['*.key']\n"
        "      approval: {write: ask, delete: blocked, read: ask}\n"
    )
    with zonemount.mount(
        tmp_path / "mnt", config=tmp_path / "p.yaml", args=["--audit-log", str(tmp_path / "a.jsonl")]
    ) as m:
        st = m.client.status()
        cli = zonemount.run_cli(["status", "--json", str(m.mountpoint)])
    # What the daemon sends, and what `status --json` prints, is all typed.
    import json

    for raw in (st.raw, json.loads(cli)):
        assert set(raw) <= fields(zonemount.Status), set(raw) - fields(zonemount.Status)
        for z in raw["zones"]:
            assert set(z) <= fields(zonemount.ZoneStatus)
            assert set(z["policy"]) <= fields(zonemount.ZonePolicy), z["policy"]
            assert set(z["policy"]["approval"]) <= fields(zonemount.ApprovalPolicy)
        if raw.get("io"):
            assert set(raw["io"]) <= fields(zonemount.IoStatus)
    assert zonemount.Status.from_json(json.loads(cli)) == st
    p = st.zones[0].policy
    assert (p.access, p.suffixes, p.max_file_bytes, p.protect) == ("rw", (".md",), 1000, (".git",))
    assert (p.hide, p.ask_read) == (("*.pem",), ("*.key",))
    assert p.approval == zonemount.ApprovalPolicy(write="ask", delete="blocked", read="ask")
    assert st.pid > 0 and st.started > 0 and st.owner_uid == os.geteuid()
    assert st.audit_log == str(tmp_path / "a.jsonl")
    assert st.sandbox_mode == "direct" and not st.no_approvals
    assert isinstance(st.counters["requests"], int)
    assert st.io is not None and st.io.mode in ("passthrough", "daemon")
    assert st.io.busy_poll_us is not None and 0 <= st.io.busy_poll_us <= 1000
    # Why polling is off, when it is, is also the text line's clause.
    if st.io.busy_poll_off is not None:
        assert st.io.busy_poll_off.startswith("off: ")
        assert st.io.transport_detail is not None
        assert "(now %s)" % st.io.busy_poll_off in st.io.transport_detail
    # Idle polling: held or not, and why not where it can't be.
    assert st.io.idle_poll_held is not None
    if st.io.idle_poll_off is not None:
        assert st.io.idle_poll_off.startswith("off: ") and not st.io.idle_poll_held
        assert st.io.transport_detail is not None
        assert st.io.transport_detail.endswith("; idle CPUs halt (%s)" % st.io.idle_poll_off)
    assert st.cache_ttl_secs is not None and st.cache_ttl_secs.ro >= st.cache_ttl_secs.rw


def test_status_says_why_busy_polling_is_off(tmp_path: Path, zm_bin: str) -> None:
    # A daemon started on one CPU (it inherits this process's affinity)
    # never polls, and says why.
    (tmp_path / "w").mkdir()
    (tmp_path / "mnt").mkdir()
    (tmp_path / "p.yaml").write_text(
        "sandbox:\n  mode: direct\n  zones:\n    w: {path: ./w, mode: rw}\n"
    )
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        with zonemount.mount(tmp_path / "mnt", config=tmp_path / "p.yaml") as m:
            st = m.client.status()
    finally:
        os.sched_setaffinity(0, cpus)
    assert st.io is not None and st.io.transport_detail is not None
    if st.io.transport == "dev-fuse":
        assert st.io.busy_poll_us is not None and st.io.busy_poll_us > 0
        assert st.io.busy_poll_off == "off: the daemon may run on one CPU only"
        assert "(now %s)" % st.io.busy_poll_off in st.io.transport_detail
    else:
        # Over io_uring there are no /dev/fuse threads to poll.
        assert st.io.transport == "io-uring" and st.io.busy_poll_off is None
    # Idle CPUs are never kept polling for it either (an ordinary user's
    # daemon can't open the device at all).
    assert st.io.idle_poll_held is False
    if os.geteuid() == 0:
        assert st.io.idle_poll_off == "off: the daemon may run on one CPU only"
    else:
        assert st.io.idle_poll_off is not None and "/dev/cpu_dma_latency" in st.io.idle_poll_off


def test_check_says_allow_ask_or_refuse_and_touches_nothing(mounted: zonemount.Mount, project: Path) -> None:
    ok = mounted.check("/data/readme.txt")
    assert (ok.decision, ok.allowed, ok.zone, ok.operation, ok.errno) == ("allow", True, "data", "read", None)
    ask = mounted.check(mounted.mountpoint / "final/new.md", "write")
    assert (ask.decision, ask.action, ask.path) == ("ask", "create", "/final/new.md")
    no = zonemount.check(mounted.mountpoint, "/data/x", "write")
    assert (no.decision, no.errno, no.allowed) == ("refuse", "EROFS", False)
    assert "read-only" in no.reason and no.message.startswith("Cannot create '/data/x'")
    assert not (project / "final/new.md").exists()
    assert mounted.client.requests() == []
    with pytest.raises(zonemount.CommandError) as e:
        mounted.check("/etc/passwd")
    assert e.value.returncode == 2 and "outside the mount" in str(e.value)
    with pytest.raises(ValueError):
        mounted.check("/data/readme.txt", "chmod")  # type: ignore[arg-type]


def test_run_a_command_in_the_mount_and_always_unmount(project: Path, zm_bin: str) -> None:
    mnt = project / "mnt"
    done = zonemount.run(
        ["sh", "-c", "cat data/readme.txt; echo err >&2; exit 7"], mnt, config=project / "project.yaml"
    )
    assert (done.returncode, done.stdout, done.stderr) == (7, "hello\n", "err\n")
    assert not is_mounted(mnt)
    # A fresh temporary mountpoint, made and removed.
    done = zonemount.run(["pwd"], config=project / "project.yaml")
    assert done.returncode == 0
    assert not Path(done.stdout.strip()).exists()


def test_run_a_callable_and_unmount_when_it_raises(project: Path, zm_bin: str) -> None:
    mnt = project / "mnt"
    got = zonemount.run(lambda m: (m.mountpoint / "data/readme.txt").read_text(), mnt,
                        config=project / "project.yaml")
    assert got == "hello\n"
    assert not is_mounted(mnt)

    def boom(m: zonemount.Mount) -> None:
        assert is_mounted(m.mountpoint)
        raise RuntimeError("the task failed")

    with pytest.raises(RuntimeError, match="the task failed"):
        zonemount.run(boom, mnt, config=project / "project.yaml")
    assert not is_mounted(mnt)
    with pytest.raises(TypeError):
        zonemount.run("ls -l", mnt, config=project / "project.yaml")
    assert not is_mounted(mnt)


def test_run_kills_the_command_group_on_timeout_and_unmounts(project: Path, zm_bin: str) -> None:
    mnt = project / "mnt"
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        # A child of the command holds the mount too: the whole group goes.
        zonemount.run(["sh", "-c", "sleep 60 & sleep 60; wait"], mnt, config=project / "project.yaml",
                      timeout=1)
    assert time.monotonic() - start < 30
    assert not is_mounted(mnt)
