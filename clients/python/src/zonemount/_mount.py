"""Running the ``zonemount`` binary: a mount that is always unmounted."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Sequence, TypeVar, Union, overload

from ._client import Client, PathLike, exact
from ._errors import CommandError, ProtocolError, ZonemountError

T = TypeVar("T")

#: What a worker would do to a path, for :func:`check`.
Operation = Literal["read", "write", "delete"]


def binary(explicit: Optional[PathLike] = None) -> str:
    """The ``zonemount`` binary: ``explicit``, else ``$ZONEMOUNT_BIN``,
    else ``zonemount`` on PATH."""
    if explicit is not None:
        return os.fspath(explicit)
    env = os.environ.get("ZONEMOUNT_BIN")
    if env:
        return env
    found = shutil.which("zonemount")
    if found is None:
        raise ZonemountError(
            "the zonemount binary is not on PATH: install it (cargo install --locked "
            "--path .) or set ZONEMOUNT_BIN"
        )
    return found


def run_cli(
    args: Sequence[str],
    bin: Optional[PathLike] = None,
    timeout: float = 120,
    ok: Sequence[int] = (0,),
) -> str:
    """Run ``zonemount ARGS``; its stdout when its exit status is in
    ``ok``, else :class:`CommandError` with its one-line message and exit
    status."""
    try:
        done = subprocess.run(
            [binary(bin), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise ZonemountError(f"zonemount {' '.join(args)} did not finish within {timeout} s") from e
    if done.returncode not in ok:
        # zonemount says what went wrong in its first line (clap's usage
        # errors add hints after it).
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        msg = lines[0] if lines else f"zonemount {args[0]} exited {done.returncode}"
        raise CommandError(msg.removeprefix("zonemount: "), done.returncode)
    return done.stdout


@dataclass(frozen=True)
class Check:
    """Whether a worker's operation on a path would be allowed, asked or
    refused, and why (``zonemount check --json``)."""

    #: As a worker sees it from the mount's root (``path_bytes``: exact).
    path: str
    #: ``None`` at the mount's root.
    zone: Optional[str]
    #: ``read``, ``write`` or ``delete``, as asked.
    operation: str
    #: What it amounts to: ``read``, ``write``, ``create``, ``change``, ``delete``.
    action: str
    #: ``allow``, ``ask`` or ``refuse``.
    decision: str
    #: What the worker would get when refused, e.g. ``EROFS``.
    errno: Optional[str]
    reason: str
    message: str
    path_bytes: bytes = field(default=b"", repr=False, compare=False)

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Check":
        try:
            return cls(
                path=str(d["path"]),
                zone=None if d.get("zone") is None else str(d["zone"]),
                operation=str(d["operation"]),
                action=str(d["action"]),
                decision=str(d["decision"]),
                errno=None if d.get("errno") is None else str(d["errno"]),
                reason=str(d["reason"]),
                message=str(d["message"]),
                path_bytes=exact(d, "path") or b"",
            )
        except (KeyError, TypeError) as e:
            raise ProtocolError(f"a check answer the client can't read ({e!r}): {d}") from e


def check(
    mountpoint: PathLike,
    path: PathLike,
    operation: Operation = "read",
    *,
    bin: Optional[PathLike] = None,
) -> Check:
    """Would a worker's ``operation`` on ``path`` (under ``mountpoint``, or
    as a worker sees it: ``/zone/...``) be allowed, asked or refused, and
    why? Touches nothing. Errors (not a live mount, a path outside it) are
    :class:`CommandError`."""
    if operation not in ("read", "write", "delete"):
        raise ValueError(f"operation must be read, write or delete, not {operation!r}")
    out = run_cli(
        ["check", "--json", os.fspath(mountpoint), os.fspath(path), f"--{operation}"],
        bin,
        timeout=60,
        # 0 allowed, 3 would ask, 4 refused: each an answer.
        ok=(0, 3, 4),
    )
    try:
        d = json.loads(out)
    except ValueError as e:
        raise ProtocolError(f"zonemount check printed no JSON: {out[:200]!r}") from e
    return Check.from_json(d)


@dataclass
class Mount:
    """A live mount made by :func:`mount`."""

    mountpoint: Path
    client: Client
    bin: str

    def check(self, path: PathLike, operation: Operation = "read") -> Check:
        """:func:`check` on this mount."""
        return check(self.mountpoint, path, operation, bin=self.bin)

    def unmount(self, lazy: bool = False) -> None:
        """Unmount now (waits for the daemon). Later calls do nothing."""
        self.client.close()
        args = ["unmount", *(["--lazy"] if lazy else []), os.fspath(self.mountpoint)]
        run_cli(args, self.bin)


@contextlib.contextmanager
def mount(
    mountpoint: Optional[PathLike] = None,
    *,
    config: Optional[PathLike] = None,
    workers: Sequence[PathLike] = (),
    zones: Sequence[str] = (),
    preset: Optional[str] = None,
    args: Sequence[str] = (),
    bin: Optional[PathLike] = None,
) -> Iterator[Mount]:
    """Mount with ``zonemount mount``, yield the :class:`Mount`, and always
    unmount on the way out (lazily if the mount is still busy).

    ``mountpoint`` defaults to a fresh temporary directory, removed
    afterwards; one given must be an empty directory (``zonemount mount``
    refuses one that holds files unless ``args`` has ``--nonempty``).
    ``zones`` are ``NAME=PATH[:ro|rw|staged]`` (``--zone``), added to
    ``config`` or ``preset`` when given, else the whole mount. ``args`` are more ``mount`` options (``--approval-timeout``,
    ``--audit-log``, ...). Errors are :class:`CommandError` with the
    command's own one-line message.
    """
    exe = binary(bin)
    made: Optional[str] = None
    if mountpoint is None:
        made = tempfile.mkdtemp(prefix="zonemount-")
        mountpoint = made
    mp = Path(os.path.realpath(os.fspath(mountpoint)))
    argv = ["mount", "-q"]
    if config is not None:
        argv += ["--config", os.fspath(config)]
    for w in workers:
        argv += ["--worker", os.fspath(w)]
    if preset is not None:
        argv += ["--preset", preset]
    for z in zones:
        argv += ["--zone", z]
    argv += [*args, os.fspath(mp)]
    try:
        run_cli(argv, exe)
        m = Mount(mountpoint=mp, client=Client.for_mount(mp), bin=exe)
        try:
            yield m
        finally:
            try:
                m.unmount()
            except CommandError:
                m.unmount(lazy=True)
    finally:
        if made is not None:
            with contextlib.suppress(OSError):
                os.rmdir(made)


@overload
def run(
    target: Sequence[str],
    mountpoint: Optional[PathLike] = None,
    *,
    config: Optional[PathLike] = None,
    workers: Sequence[PathLike] = (),
    zones: Sequence[str] = (),
    preset: Optional[str] = None,
    args: Sequence[str] = (),
    bin: Optional[PathLike] = None,
    timeout: Optional[float] = None,
    env: Optional[dict[str, str]] = None,
) -> "subprocess.CompletedProcess[str]": ...


@overload
def run(
    target: Callable[[Mount], T],
    mountpoint: Optional[PathLike] = None,
    *,
    config: Optional[PathLike] = None,
    workers: Sequence[PathLike] = (),
    zones: Sequence[str] = (),
    preset: Optional[str] = None,
    args: Sequence[str] = (),
    bin: Optional[PathLike] = None,
    timeout: Optional[float] = None,
    env: Optional[dict[str, str]] = None,
) -> T: ...


def run(
    target: Union[Sequence[str], Callable[[Mount], T]],
    mountpoint: Optional[PathLike] = None,
    *,
    config: Optional[PathLike] = None,
    workers: Sequence[PathLike] = (),
    zones: Sequence[str] = (),
    preset: Optional[str] = None,
    args: Sequence[str] = (),
    bin: Optional[PathLike] = None,
    timeout: Optional[float] = None,
    env: Optional[dict[str, str]] = None,
) -> Union["subprocess.CompletedProcess[str]", T]:
    """Mount (as :func:`mount`, same options), run ``target``, and always
    unmount, whatever happens.

    ``target`` is a command (a list: ``["make", "test"]``, no shell),
    run in the mount's root in a session of its own (as ``zonemount run``
    starts CMD: a decision from the worker's own session is refused), with
    its output captured; the answer is its ``CompletedProcess``. After
    ``timeout`` seconds its whole process group is killed and
    ``subprocess.TimeoutExpired`` raised. Or ``target`` is a callable,
    given the :class:`Mount`; the answer is what it returns.
    """
    if isinstance(target, (str, bytes)):
        raise TypeError("give the command as a list of arguments, not a string")
    with mount(
        mountpoint,
        config=config,
        workers=workers,
        zones=zones,
        preset=preset,
        args=args,
        bin=bin,
    ) as m:
        if callable(target):
            return target(m)
        return _run_worker(list(target), m.mountpoint, timeout, env)


def _run_worker(
    argv: list[str], cwd: Path, timeout: Optional[float], env: Optional[dict[str, str]]
) -> "subprocess.CompletedProcess[str]":
    """``argv`` in ``cwd``, a session of its own; its group killed on
    timeout, so nothing of it keeps the mount busy."""
    p = subprocess.Popen(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    return subprocess.CompletedProcess(argv, p.returncode, out, err)
