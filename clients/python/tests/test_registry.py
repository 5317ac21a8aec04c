"""The registry is read only where the binary reads it: a runtime
directory (and its ``mounts``) of this user's own, that nobody else may
write in, not a symbolic link. Needs no mount: a record is planted by hand,
naming a socket nobody listens on."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

import zonemount
from zonemount._registry import mount_key

ROOT = os.geteuid() == 0
#: As root the client looks in /run/zonemount: the tests play uid 4242,
#: whose runtime directory is $XDG_RUNTIME_DIR/zonemount (root can give
#: directories away to play the other user too).
UID = 4242 if ROOT else os.geteuid()
GID = 4242 if ROOT else os.getegid()


@pytest.fixture()
def as_user(monkeypatch: pytest.MonkeyPatch) -> None:
    if ROOT:
        monkeypatch.setattr(os, "geteuid", lambda: UID)


def plant(rt: Path, mountpoint: Path, owner: int = UID) -> Path:
    """A registry under ``rt`` (``zonemount/mounts``, 0700, ``owner``'s)
    whose record of ``mountpoint`` names /some/control.sock."""
    zmdir = rt / "zonemount"
    (zmdir / "mounts").mkdir(parents=True, exist_ok=True)
    mp = os.path.realpath(mountpoint)
    record = zmdir / "mounts" / f"{mount_key(mp)}.json"
    record.write_text(json.dumps({"mountpoint": mp, "pid": 1, "control": "/some/control.sock"}))
    for d in (zmdir, zmdir / "mounts"):
        d.chmod(0o700)
        if ROOT:
            os.chown(d, owner, GID)
    return zmdir


@pytest.fixture()
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_user: None) -> Path:
    d = tmp_path / "rt"
    d.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(d))
    return d


def test_a_registry_of_this_users_own_is_read(rt: Path, tmp_path: Path) -> None:
    plant(rt, tmp_path)
    assert zonemount.control_socket(tmp_path) == Path("/some/control.sock")


def test_a_registry_others_may_write_in_is_refused(rt: Path, tmp_path: Path) -> None:
    zmdir = plant(rt, tmp_path)
    (zmdir / "mounts").chmod(0o777)
    with pytest.raises(
        zonemount.NotMountedError,
        match=r"^the runtime directory .*mounts has mode 0777: others may write in it",
    ):
        zonemount.Client.for_mount(tmp_path)
    (zmdir / "mounts").chmod(0o700)
    zmdir.chmod(0o770)
    with pytest.raises(zonemount.NotMountedError, match=r"zonemount has mode 0770: others may write"):
        zonemount.control_socket(tmp_path)


def test_a_registry_another_user_made_is_refused(rt: Path, tmp_path: Path) -> None:
    if not ROOT:
        pytest.skip("only root can give a directory to another user")
    # Another user made the registry (and let anyone write in it), with a
    # record that points the client at their socket.
    zmdir = plant(rt, tmp_path, owner=UID + 1)
    (zmdir / "mounts").chmod(0o777)
    with pytest.raises(
        zonemount.NotMountedError,
        match=rf"^the runtime directory .*zonemount belongs to uid {UID + 1}, not to this user \(uid {UID}\)",
    ):
        zonemount.Client.for_mount(tmp_path)
    # Their `mounts` in a directory of this user's: refused too.
    os.chown(zmdir, UID, GID)
    with pytest.raises(zonemount.NotMountedError, match=rf"mounts belongs to uid {UID + 1}"):
        zonemount.find_record(tmp_path)


def test_a_symbolic_link_to_a_fit_registry_is_refused(rt: Path, tmp_path: Path) -> None:
    zmdir = plant(rt, tmp_path)
    zmdir.rename(rt / "real")
    zmdir.symlink_to("real")
    with pytest.raises(zonemount.NotMountedError, match=r"zonemount is a symbolic link"):
        zonemount.control_socket(tmp_path)
    zmdir.unlink()
    zmdir.mkdir(mode=0o700)
    if ROOT:
        os.chown(zmdir, UID, GID)
    (zmdir / "mounts").symlink_to(rt / "real" / "mounts")
    with pytest.raises(zonemount.NotMountedError, match=r"mounts is a symbolic link"):
        zonemount.control_socket(tmp_path)


@pytest.fixture()
def tmp_fallback(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fallback /tmp/zonemount-UID of a uid with no XDG_RUNTIME_DIR
    and no /run/user/UID, removed after."""
    if not ROOT:
        pytest.skip("only root can play a user whose /tmp/zonemount-UID another made")
    uid = next(
        u
        for u in range(424200, 424300)
        if not Path(f"/run/user/{u}").exists() and not Path(f"/tmp/zonemount-{u}").exists()
    )
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    d = Path(f"/tmp/zonemount-{uid}")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_tmp_fallback_another_user_made_is_refused(tmp_fallback: Path, tmp_path: Path) -> None:
    uid = os.geteuid()
    assert zonemount.runtime_dir() == tmp_fallback
    (tmp_fallback / "mounts").mkdir(parents=True)
    mp = os.path.realpath(tmp_path)
    (tmp_fallback / "mounts" / f"{mount_key(mp)}.json").write_text(
        json.dumps({"mountpoint": mp, "pid": 1, "control": "/their/control.sock"})
    )
    for d in (tmp_fallback, tmp_fallback / "mounts"):
        d.chmod(0o700)
        os.chown(d, uid + 1, uid + 1)
    with pytest.raises(
        zonemount.NotMountedError,
        match=rf"^the runtime directory {tmp_fallback} belongs to uid {uid + 1}, not to this user",
    ):
        zonemount.Client.for_mount(tmp_path)
    # The same directory, this user's: read.
    for d in (tmp_fallback, tmp_fallback / "mounts"):
        os.chown(d, uid, uid)
    assert zonemount.control_socket(tmp_path) == Path("/their/control.sock")
