"""Finding a mount's control socket from its mountpoint.

The daemon writes one JSON record per mount into its runtime directory
(``mounts/<key>.json``, where ``<key>`` is the FNV-1a hash of the canonical
mountpoint); the record names the control socket. The runtime directory is
``/run/zonemount`` for root; for a user ``$XDG_RUNTIME_DIR/zonemount``, else
``/run/user/UID/zonemount`` when that directory is the user's, else
``/tmp/zonemount-UID``. A user may also reach a mount root made for them,
so root's registry is looked at second.

A record names the socket the client trusts with decisions, so a
directory is read only when the binary would read it: a directory (not a
symbolic link) owned by this user (root's: by root) that nobody else may
write in. When this user's runtime directory or its ``mounts`` is not
such a directory, nothing is read and :class:`NotMountedError` says why, as
the binary refuses it. A record of another mount namespace is not this
one's mount.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Optional

from ._errors import NotMountedError

ROOT_RUNTIME_DIR = Path("/run/zonemount")


def runtime_dir() -> Path:
    """This user's runtime directory, as the daemon computes it."""
    uid = os.geteuid()
    if uid == 0:
        return ROOT_RUNTIME_DIR
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "zonemount"
    run_user = Path(f"/run/user/{uid}")
    try:
        st = run_user.stat()
        if run_user.is_dir() and st.st_uid == uid:
            return run_user / "zonemount"
    except OSError:
        pass
    return Path(f"/tmp/zonemount-{uid}")


def _unfit(path: Path, owner: int) -> Optional[str]:
    """Why ``path`` can't be trusted to hold ``owner``'s records, as the
    binary judges it (``lstat``: a symbolic link is seen, never followed);
    None when it can, or when it is missing (nothing there to trust)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"can't be examined ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != owner:
        return f"belongs to uid {st.st_uid}, not to this user (uid {owner})"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return f"has mode {mode:04o}: others may write in it"
    return None


def check_runtime_dir() -> Path:
    """This user's runtime directory, once it and its ``mounts`` are found
    fit to read (or missing): owned by this user, nobody else may write in
    them, not symbolic links. Raises :class:`NotMountedError` otherwise,
    with the binary's words."""
    base = runtime_dir()
    uid = os.geteuid()
    for d in (base, base / "mounts"):
        why = _unfit(d, uid)
        if why is not None:
            raise NotMountedError(
                f"the runtime directory {d} {why}: zonemount won't keep or read "
                "mount records and control sockets there (another user may have "
                "made it); remove it, or set XDG_RUNTIME_DIR to a directory of "
                "your own"
            )
    return base


def _root_registry_fit() -> bool:
    """Whether root's registry is as root keeps it: there, root's, and
    nobody else may write in it."""
    return all(
        d.exists() and _unfit(d, 0) is None
        for d in (ROOT_RUNTIME_DIR, ROOT_RUNTIME_DIR / "mounts")
    )


def mount_key(mountpoint: str) -> str:
    """FNV-1a (64 bit) of the mountpoint's bytes, as 16 hex digits."""
    h = 0xCBF29CE484222325
    for b in os.fsencode(mountpoint):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _read(path: Path) -> Optional[dict[str, Any]]:
    try:
        with path.open("rb") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _mount_namespace() -> Optional[int]:
    """This process's mount namespace: the inode of /proc/self/ns/mnt."""
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return None


def _here(rec: dict[str, Any]) -> bool:
    """Whether the record's mount lives in this mount namespace (records
    without ``mntns``, from older daemons, count as this one's)."""
    theirs = rec.get("mntns")
    ours = _mount_namespace()
    return not isinstance(theirs, int) or ours is None or theirs == ours


def find_record(mountpoint: "os.PathLike[str] | str") -> dict[str, Any]:
    """The registry record of the mount at ``mountpoint``.

    Raises :class:`NotMountedError` when no daemon recorded it, or when
    this user's runtime directory can't be trusted (see
    :func:`check_runtime_dir`).
    """
    mp = os.path.realpath(os.fspath(mountpoint))
    name = f"{mount_key(mp)}.json"
    own = check_runtime_dir()
    bases = [own]
    if own != ROOT_RUNTIME_DIR and _root_registry_fit():
        bases.append(ROOT_RUNTIME_DIR)
    for base in bases:
        rec = _read(base / "mounts" / name)
        if rec is not None and rec.get("mountpoint") == mp and _here(rec):
            return rec
    raise NotMountedError(
        f"{mp} is not a zonemount mount this user can see: no record in "
        f"{own / 'mounts'} (is it mounted? zonemount list)"
    )


def control_socket(mountpoint: "os.PathLike[str] | str") -> Path:
    """The control socket of the mount at ``mountpoint``."""
    rec = find_record(mountpoint)
    control = rec.get("control")
    if not isinstance(control, str) or not control:
        raise NotMountedError(
            f"the record of {rec.get('mountpoint')} names no control socket"
        )
    return Path(control)
