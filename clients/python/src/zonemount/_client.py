"""The control socket's client: protocol v1, JSON Lines over a Unix socket.

Each request is one JSON object with ``"v": 1`` and an ``op``; each answer
is one object with ``"v"`` and ``"ok"`` (and ``"error"``, one line, when
``ok`` is false). ``watch`` answers once, then streams one event per line
until the connection closes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Literal, Optional, Sequence, Union

from ._errors import ProtocolError, ZonemountError
from ._registry import control_socket

if TYPE_CHECKING:
    from ._status import Status

#: The protocol version this client speaks.
PROTOCOL_VERSION = 1

#: How far an ``allow`` reaches: this request only, this class on this path
#: for the rest of the mount, or this class anywhere in the zone.
Scope = Literal["once", "path", "zone"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Item:
    """One class on one path that a request asks for (a rename asks for
    ``write`` on the target and ``delete`` on the source)."""

    cls: str
    zone: str
    path: str
    #: ``path``'s exact bytes.
    path_bytes: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class Request:
    """A syscall waiting for a decision."""

    id: int
    zone: str
    #: ``write``, ``delete`` or ``write+delete``.
    cls: str
    #: The operation: ``create``, ``write``, ``unlink``, ``rename``, ...
    op: str
    #: The path as the worker sees it.
    path: str
    #: A rename's destination; a hard link's existing file (its new name is
    #: ``path``).
    target: Optional[str]
    #: The calling process and its uid.
    pid: int
    uid: int
    cmdline: str
    #: When it started waiting (RFC 3339).
    time: str
    #: Seconds left before it is denied.
    timeout_secs: float
    items: tuple[Item, ...]
    #: The caller was told to retry once this is decided (a mkdir, rm, mv...
    #: can't wait while the kernel locks its directory).
    retry: bool = False
    #: Calls held until the decision when it was listed (for a create whose
    #: file was made at once: the writes on that file); 0 when none.
    waiting: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # A worker chooses names and command lines: the text fields hold U+FFFD
    # where their bytes are not UTF-8; these give the exact bytes. Show
    # them to a person escaped, never raw (they may hold ESC, CR or bidi
    # controls).

    @property
    def path_bytes(self) -> bytes:
        """The path's exact bytes."""
        return exact(self.raw, "path") or b""

    @property
    def target_bytes(self) -> Optional[bytes]:
        """The target's exact bytes (None without a target)."""
        return exact(self.raw, "target")

    @property
    def cmdline_bytes(self) -> bytes:
        """The command line's exact bytes (its arguments joined by spaces)."""
        return exact(self.raw, "cmdline") or b""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Request":
        try:
            return cls(
                id=int(d["id"]),
                zone=str(d["zone"]),
                cls=str(d["class"]),
                op=str(d["op"]),
                path=str(d["path"]),
                target=None if d.get("target") is None else str(d["target"]),
                pid=int(d["pid"]),
                uid=int(d["uid"]),
                cmdline=str(d.get("cmdline", "")),
                time=str(d.get("time", "")),
                timeout_secs=float(d.get("timeout_secs", 0)),
                items=tuple(
                    Item(
                        cls=str(i["class"]),
                        zone=str(i["zone"]),
                        path=str(i["path"]),
                        path_bytes=exact(i, "path") or b"",
                    )
                    for i in d.get("items", [])
                ),
                retry=bool(d.get("retry", False)),
                waiting=int(d.get("waiting", 0)),
                raw=d,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"a request the client can't read ({e}): {d}") from e


@dataclass(frozen=True)
class Event:
    """One line of ``watch``: a request that waits (``kind == "request"``),
    the end of one (``"resolved"``: ``outcome`` is ``allow``, ``deny``,
    ``timeout`` or ``withdrawn``), or events this watcher missed
    (``"lagged"``)."""

    kind: str
    request: Optional[Request] = None
    id: Optional[int] = None
    outcome: Optional[str] = None
    scope: Optional[str] = None
    approver_uid: Optional[int] = None
    reason: Optional[str] = None
    missed: Optional[int] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Event":
        kind = str(d.get("event", ""))
        if kind == "request":
            req = d.get("request")
            if not isinstance(req, dict):
                raise ProtocolError(f"a request event without a request: {d}")
            return cls(kind=kind, request=Request.from_json(req), raw=d)
        if kind == "resolved":
            return cls(
                kind=kind,
                id=_opt_int(d.get("id")),
                outcome=_opt_str(d.get("outcome")),
                scope=_opt_str(d.get("scope")),
                approver_uid=_opt_int(d.get("approver_uid")),
                reason=_opt_str(d.get("reason")),
                raw=d,
            )
        if kind == "lagged":
            return cls(kind=kind, missed=_opt_int(d.get("missed")), raw=d)
        raise ProtocolError(f"an event the client doesn't know: {d}")


@dataclass(frozen=True)
class Actor:
    """Who made a change: the process (its id as the daemon sees it), its
    command, the caller's uid, and when. The command is what the process
    presented (a worker can set its own argv and comm), not proof."""

    pid: int
    uid: int
    #: RFC 3339, UTC.
    time: str
    #: The process's name (at most 15 bytes); None when unknown (the
    #: process was gone before it could be read).
    comm: Optional[str] = None
    #: The first 512 bytes of its argv, NULs as spaces; None when unknown.
    argv: Optional[str] = None
    #: ``comm``'s and ``argv``'s exact bytes (the text fields hold U+FFFD
    #: where they are not UTF-8).
    comm_bytes: Optional[bytes] = field(default=None, repr=False, compare=False)
    argv_bytes: Optional[bytes] = field(default=None, repr=False, compare=False)

    @property
    def known(self) -> bool:
        """Whether the command could be read."""
        return self.comm is not None or self.argv is not None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Actor":
        return cls(
            pid=int(d.get("pid", 0)),
            uid=int(d.get("uid", 0)),
            time=str(d.get("time", "")),
            comm=_opt_str(d.get("comm")),
            argv=_opt_str(d.get("argv")),
            comm_bytes=exact(d, "comm"),
            argv_bytes=exact(d, "argv"),
        )


def _opt_actor(v: Any) -> Optional[Actor]:
    return Actor.from_json(v) if isinstance(v, dict) else None


@dataclass(frozen=True)
class Change:
    """One changed path of a zone (``changes``, ``commit``, ``discard``)."""

    #: Relative to the zone's directory.
    path: str
    #: ``added``, ``modified``, ``deleted`` or ``renamed``.
    kind: str
    #: A rename's source.
    from_path: Optional[str] = None
    #: ``file``, ``dir``, ``symlink`` or ``special`` (staged zones).
    file_type: Optional[str] = None
    size: Optional[int] = None
    mode: Optional[int] = None
    old_size: Optional[int] = None
    old_mode: Optional[int] = None
    #: A deleted tree, or a dir replaced by a file or symlink (which
    #: removes it): how many entries it held (staged zones).
    entries: Optional[int] = None
    #: What differs in a modification: ``content``, ``mode``, ``owner``,
    #: ``times``, ``xattrs``, ``target``, ``type`` (staged zones).
    what: tuple[str, ...] = ()
    #: A unified diff, when asked for (staged zones).
    diff: Optional[str] = None
    #: Who made the path's first and its last change (None: not recorded).
    first: Optional[Actor] = None
    last: Optional[Actor] = None
    #: ``path``'s and ``from_path``'s exact bytes (the text fields hold
    #: U+FFFD where a name's bytes are not UTF-8).
    path_bytes: bytes = field(default=b"", repr=False, compare=False)
    from_bytes: Optional[bytes] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Change":
        return cls(
            path=str(d.get("path", "")),
            kind=str(d.get("kind", "")),
            from_path=_opt_str(d.get("from")),
            file_type=_opt_str(d.get("file_type")),
            size=_opt_int(d.get("size")),
            mode=_opt_int(d.get("mode")),
            old_size=_opt_int(d.get("old_size")),
            old_mode=_opt_int(d.get("old_mode")),
            entries=_opt_int(d.get("entries")),
            what=tuple(str(w) for w in d.get("what", [])),
            diff=_opt_str(d.get("diff")),
            first=_opt_actor(d.get("first")),
            last=_opt_actor(d.get("last")),
            path_bytes=exact(d, "path") or b"",
            from_bytes=exact(d, "from"),
        )


@dataclass(frozen=True)
class ZoneChanges:
    """A zone's change report: for a staged zone what its stage holds, for
    a plain rw zone what the mount's workers changed since it was
    mounted."""

    zone: str
    staged: bool
    changes: list[Change]
    #: A plain zone whose workers changed more paths than the mount
    #: remembers: ``changes`` is not all.
    incomplete: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ZoneChanges":
        return cls(
            zone=str(d.get("zone", "")),
            staged=bool(d.get("staged", False)),
            changes=[Change.from_json(c) for c in d.get("changes", [])],
            incomplete=bool(d.get("incomplete", False)),
        )


@dataclass(frozen=True)
class Conflict:
    """A path a commit left in the stage, and why; ``at``: where the
    host's change is when not at ``path`` itself (a dir above it, or an
    entry inside a dir it would remove)."""

    path: str
    why: str
    at: Optional[str] = None
    #: ``path``'s and ``at``'s exact bytes.
    path_bytes: bytes = field(default=b"", repr=False, compare=False)
    at_bytes: Optional[bytes] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Conflict":
        return cls(
            path=str(d.get("path", "")),
            why=str(d.get("why", "")),
            at=_opt_str(d.get("at")),
            path_bytes=exact(d, "path") or b"",
            at_bytes=exact(d, "at"),
        )


@dataclass(frozen=True)
class ZoneCommit:
    """What a commit (or discard: ``applied`` are the dropped changes) did
    in one staged zone."""

    zone: str
    applied: list[Change]
    conflicts: list[Conflict]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ZoneCommit":
        """A zone of a ``commit`` answer."""
        return cls(
            zone=str(d.get("zone", "")),
            applied=[Change.from_json(c) for c in d.get("applied", [])],
            conflicts=[Conflict.from_json(c) for c in d.get("conflicts", [])],
        )

    @classmethod
    def from_discard_json(cls, d: dict[str, Any]) -> "ZoneCommit":
        """A zone of a ``discard`` answer: ``applied`` are the dropped
        changes; ``conflicts`` says why a zone was left alone (files open
        for writing)."""
        return cls(
            zone=str(d.get("zone", "")),
            applied=[Change.from_json(c) for c in d.get("discarded", [])],
            conflicts=[Conflict.from_json(c) for c in d.get("conflicts", [])],
        )


def is_under(path: str, directory: str) -> bool:
    """Whether the worker path ``path`` is ``directory`` itself or inside
    it: ``/workspace/out`` and ``/workspace/out/a.txt`` are under
    ``/workspace/out/`` (or ``/workspace/out``), ``/workspace/outside`` is
    not. A path with a ``..`` component is under nothing (the daemon never
    sends one), and nothing is under ``/`` or an empty ``directory``: to
    allow everything, allow without asking this."""
    top = directory.rstrip("/")
    if not top or ".." in path.split("/"):
        return False
    return path == top or path.startswith(top + "/")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a staged zone."""

    id: int
    #: When it was taken: RFC 3339, UTC.
    time: str
    label: Optional[str] = None
    #: How many paths changed since the checkpoint before it (or since
    #: the backing dir, for the oldest); ``checkpoints()`` only.
    paths: Optional[int] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Checkpoint":
        return cls(
            id=int(d.get("id", 0)),
            time=str(d.get("time", "")),
            label=_opt_str(d.get("label")),
            paths=_opt_int(d.get("paths")),
        )


@dataclass(frozen=True)
class ZoneCheckpoints:
    """A staged zone's checkpoints, oldest first."""

    zone: str
    checkpoints: list[Checkpoint]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ZoneCheckpoints":
        return cls(
            zone=str(d.get("zone", "")),
            checkpoints=[Checkpoint.from_json(c) for c in d.get("checkpoints", [])],
        )


@dataclass(frozen=True)
class ZoneRewind:
    """What a rewind did in one staged zone."""

    zone: str
    #: The checkpoint the zone (or ``paths``) now shows.
    to: int
    #: The later checkpoints dropped (a whole-zone rewind).
    dropped: tuple[int, ...] = ()
    #: A rewind of some paths: those (relative to the zone's dir).
    paths: tuple[str, ...] = ()
    #: A rewind of some paths: those of them unchanged since the
    #: checkpoint, left as they are.
    unchanged: tuple[str, ...] = ()
    #: Why the zone was left alone (files open for writing); None: done.
    left_alone: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ZoneRewind":
        return cls(
            zone=str(d.get("zone", "")),
            to=int(d.get("to", 0)),
            dropped=tuple(int(i) for i in d.get("dropped", [])),
            paths=tuple(str(p) for p in d.get("paths", [])),
            unchanged=tuple(str(p) for p in d.get("unchanged", [])),
            left_alone=_opt_str(d.get("left_alone")),
        )


def exact(d: dict[str, Any], key: str) -> Optional[bytes]:
    """The exact bytes of field ``key`` of a protocol object: its
    ``<key>_b64`` sibling (present when the bytes are not UTF-8), else the
    text's UTF-8; None when the field is absent."""
    b64 = d.get(f"{key}_b64")
    if isinstance(b64, str):
        return base64.b64decode(b64)
    v = d.get(key)
    return None if v is None else str(v).encode()


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps({"v": PROTOCOL_VERSION, **obj}) + "\n").encode()


def _answer(line: bytes) -> dict[str, Any]:
    """Check one answer line: JSON, our version, ok; else raise with the
    daemon's message."""
    if not line:
        raise ZonemountError("the daemon closed the control connection")
    try:
        ans = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"not a JSON line from the daemon: {line[:200]!r}") from e
    if not isinstance(ans, dict):
        raise ProtocolError(f"not a JSON object from the daemon: {ans!r}")
    if ans.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(
            f"the daemon speaks control protocol version {ans.get('v')}, this client "
            f"version {PROTOCOL_VERSION}: use the client that came with the zonemount binary"
        )
    if ans.get("ok") is not True:
        raise ZonemountError(str(ans.get("error", "the daemon refused without a message")))
    return ans


class Client:
    """A connection to one mount's control socket.

    ``Client.for_mount(mountpoint)`` finds the socket in the registry;
    ``Client(socket_path)`` uses a known one (``--control SOCK``). The
    protocol version is checked on connect. Thread-safe; use as a context
    manager or call :meth:`close`.
    """

    def __init__(self, socket_path: PathLike, timeout: float = 30.0) -> None:
        self.socket_path = Path(os.fspath(socket_path))
        self.timeout = timeout
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._reader: Any = None

    @classmethod
    def for_mount(cls, mountpoint: PathLike, timeout: float = 30.0) -> "Client":
        """The client of the mount at ``mountpoint`` (found in the registry)."""
        return cls(control_socket(mountpoint), timeout=timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
                self._reader = None

    def _open(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(os.fspath(self.socket_path))
        except OSError as e:
            s.close()
            raise ZonemountError(
                f"cannot reach the control socket {self.socket_path}: {e.strerror or e}"
            ) from e
        return s

    def _connected(self) -> None:
        if self._sock is not None:
            return
        s = self._open()
        reader = s.makefile("rb")
        # The version check: a cheap request whose answer carries "v".
        s.sendall(_line({"op": "list"}))
        try:
            _answer(reader.readline())
        except BaseException:
            reader.close()
            s.close()
            raise
        self._sock, self._reader = s, reader

    def _call(self, obj: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._connected()
            assert self._sock is not None
            try:
                self._sock.sendall(_line(obj))
                line = self._reader.readline()
            except OSError as e:
                self._sock.close()
                self._sock = None
                raise ZonemountError(f"control connection failed: {e}") from e
            if not line:
                self._sock.close()
                self._sock = None
            return _answer(line)

    def status(self) -> "Status":
        """The mount's status: zones, settings, pending requests, counters
        (the protocol's ``status`` object, typed; ``.raw`` has it as sent)."""
        from ._status import Status

        st = self._call({"op": "status"}).get("status")
        if not isinstance(st, dict):
            raise ProtocolError("a status answer without a status object")
        return Status.from_json(st)

    def requests(self) -> list[Request]:
        """The requests waiting for a decision now."""
        reqs = self._call({"op": "list"}).get("requests", [])
        return [Request.from_json(r) for r in reqs]

    def allow(self, id: int, scope: Scope = "once") -> None:
        """Allow request ``id``; a ``path`` or ``zone`` scope also settles
        the waiting requests it covers and later ones."""
        if scope not in ("once", "path", "zone"):
            raise ValueError(f"scope must be once, path or zone, not {scope!r}")
        self._call({"op": "decide", "id": id, "decision": "allow", "scope": scope})

    def deny(self, id: int) -> None:
        """Deny request ``id`` (the syscall gets EACCES; the same class on
        the same path is refused at once from then on)."""
        self._call({"op": "decide", "id": id, "decision": "deny"})

    def _stage_call(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A ``changes``, ``commit``, ``discard``, ``checkpoint``,
        ``checkpoints`` or ``rewind``: on a connection of its own without a
        timeout (a commit copies files)."""
        s = self._open()
        s.settimeout(None)
        reader = s.makefile("rb")
        try:
            s.sendall(_line(obj))
            return _answer(reader.readline())
        finally:
            reader.close()
            s.close()

    def changes(
        self,
        paths: Sequence[str] = (),
        diff: bool = False,
        since: Optional[int] = None,
        between: Optional[tuple[int, int]] = None,
    ) -> list[ZoneChanges]:
        """Each rw zone's change report; ``paths`` (as a worker sees them,
        ``/zone/...``) limit it; ``diff`` adds unified diffs of staged text
        files. ``since`` (a checkpoint's id): what changed since it;
        ``between`` (two ids, the older first): from one to the other
        (staged zones that have them only)."""
        obj: dict[str, Any] = {"op": "changes", "paths": list(paths), "diff": diff}
        if since is not None and between is not None:
            raise ValueError("changes takes since or between, not both")
        if since is not None:
            obj["since"] = since
        if between is not None:
            obj["between"] = [between[0], between[1]]
        a = self._stage_call(obj)
        return [ZoneChanges.from_json(z) for z in a.get("zones", [])]

    def commit(
        self, paths: Sequence[str] = (), force: bool = False, upto: Optional[int] = None
    ) -> list[ZoneCommit]:
        """Apply the staged changes (under ``paths``) to the backing dirs
        (``upto``: the state at that checkpoint; the view does not change).
        A path the host changed meanwhile is left staged as a conflict
        unless ``force``; check each zone's ``conflicts``."""
        obj: dict[str, Any] = {"op": "commit", "paths": list(paths), "force": force}
        if upto is not None:
            obj["upto"] = upto
        a = self._stage_call(obj)
        return [ZoneCommit.from_json(z) for z in a.get("zones", [])]

    def checkpoint(self, zones: Sequence[str] = (), label: Optional[str] = None) -> int:
        """Take a checkpoint of the staged zones (``zones``: ``/zone``
        names; none: all) and return its id. No file is copied; files
        open for writing are taken as they are. Not a decision: the
        worker's own side may call it."""
        obj: dict[str, Any] = {"op": "checkpoint", "paths": list(zones)}
        if label is not None:
            obj["label"] = label
        a = self._stage_call(obj)
        return int(a.get("id", 0))

    def checkpoints(self, zones: Sequence[str] = ()) -> list[ZoneCheckpoints]:
        """Each staged zone's checkpoints, oldest first, with how many
        paths changed since the one before."""
        a = self._stage_call({"op": "checkpoints", "paths": list(zones)})
        return [ZoneCheckpoints.from_json(z) for z in a.get("zones", [])]

    def rewind(self, id: int, paths: Sequence[str] = ()) -> list[ZoneRewind]:
        """Make the staged zones (or only ``paths``, ``/zone/...``) what
        they were at checkpoint ``id``, at once for the live worker. A
        whole zone drops its later checkpoints; ``paths`` keep them. A
        zone with files open for writing is left alone (``left_alone``)."""
        a = self._stage_call({"op": "rewind", "id": id, "paths": list(paths)})
        return [ZoneRewind.from_json(z) for z in a.get("zones", [])]

    def discard(self, paths: Sequence[str] = ()) -> list[ZoneCommit]:
        """Drop the staged changes (under ``paths``); the mount shows the
        backing dirs' files again. ``applied`` lists what was dropped;
        ``conflicts`` why a zone was left alone."""
        a = self._stage_call({"op": "discard", "paths": list(paths)})
        return [ZoneCommit.from_discard_json(z) for z in a.get("zones", [])]

    def watch(self) -> Iterator[Event]:
        """Every waiting request, then each new request and each end, as
        they happen, until the mount goes away (or the caller stops
        iterating). Blocks between events."""
        s = self._open()
        s.settimeout(None)
        reader = s.makefile("rb")
        try:
            s.sendall(_line({"op": "watch"}))
            _answer(reader.readline())
            for line in reader:
                if line.strip():
                    yield Event.from_json(_event(line))
        finally:
            reader.close()
            s.close()

    async def awatch(self) -> AsyncIterator[Event]:
        """:meth:`watch` for asyncio."""
        reader, writer = await asyncio.open_unix_connection(os.fspath(self.socket_path))
        try:
            writer.write(_line({"op": "watch"}))
            await writer.drain()
            _answer(await reader.readline())
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.strip():
                    yield Event.from_json(_event(line))
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


def _event(line: bytes) -> dict[str, Any]:
    try:
        ev = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"not a JSON line from the daemon: {line[:200]!r}") from e
    if not isinstance(ev, dict) or ev.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"an event of another protocol version: {ev!r}")
    return ev
