"""Running the ``zonemount`` binary: a mount that is always unmounted."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from ._client import Client, PathLike
from ._errors import CommandError, ZonemountError


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


def run_cli(args: Sequence[str], bin: Optional[PathLike] = None, timeout: float = 120) -> str:
    """Run ``zonemount ARGS``; its stdout, or :class:`CommandError` with its
    one-line message and exit status."""
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
    if done.returncode != 0:
        # zonemount says what went wrong in its first line (clap's usage
        # errors add hints after it).
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        msg = lines[0] if lines else f"zonemount {args[0]} exited {done.returncode}"
        raise CommandError(msg.removeprefix("zonemount: "), done.returncode)
    return done.stdout


@dataclass
class Mount:
    """A live mount made by :func:`mount`."""

    mountpoint: Path
    client: Client
    bin: str

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
    afterwards. ``zones`` are ``NAME=PATH[:ro|rw]`` (``--zone``), added to
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
