"""Fixtures: real mounts of the zonemount binary (found as the client
finds it: $ZONEMOUNT_BIN, else ``zonemount`` on PATH) under temporary
directories, always unmounted."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

import zonemount

REPO = Path(__file__).resolve().parents[3]

T = TypeVar("T")


@pytest.fixture(scope="session")
def zm_bin() -> str:
    try:
        b = zonemount.binary()
    except zonemount.ZonemountError as e:
        pytest.fail(f"{e} (scripts/test-python.sh puts target/debug on PATH)")
    if not os.access(b, os.X_OK):
        pytest.fail(f"no zonemount binary at {b}: build it (cargo build) or set ZONEMOUNT_BIN")
    return b


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A direct-mode project: ``data`` (ro) and ``final`` (rw, writes and
    deletes ask)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data/readme.txt").write_text("hello\n")
    (tmp_path / "final").mkdir()
    (tmp_path / "mnt").mkdir()
    (tmp_path / "project.yaml").write_text(
        "sandbox:\n"
        "  mode: direct\n"
        "  zones:\n"
        "    - {name: data, path: ./data, mode: ro}\n"
        "    - {name: final, path: ./final, mode: rw, approval: {write: ask, delete: ask}}\n"
    )
    return tmp_path


@pytest.fixture()
def mounted(project: Path, zm_bin: str) -> Iterator[zonemount.Mount]:
    with zonemount.mount(
        project / "mnt",
        config=project / "project.yaml",
        args=["--approval-timeout", "60"],
    ) as m:
        yield m
    assert not is_mounted(project / "mnt"), "the context manager unmounts"


def is_mounted(p: Path) -> bool:
    want = os.path.realpath(p)
    with open("/proc/self/mountinfo") as f:
        return any(line.split(" ")[4] == want for line in f)


def wait_for(what: str, probe: Callable[[], T], limit: float = 20.0) -> T:
    """Poll ``probe`` (bounded) until it returns something truthy."""
    deadline = time.monotonic() + limit
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {limit} s waiting for {what}")
        time.sleep(0.05)


def worker(script: str, cwd: Path) -> "subprocess.Popen[str]":
    """A worker shell in ``cwd`` (inside the mount), in its own session."""
    return subprocess.Popen(
        ["sh", "-c", script],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
        # A session of its own, as `zonemount run` gives CMD: a decision
        # from the worker's own session is refused.
        start_new_session=True,
    )
