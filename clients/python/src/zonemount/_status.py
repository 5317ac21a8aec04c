"""A mount's status as types: what the control socket's ``status`` answers
(and ``zonemount status --json`` prints), field for field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ._client import Request, exact
from ._errors import ProtocolError


def _strs(v: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in (v or ()))


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


@dataclass(frozen=True)
class ApprovalPolicy:
    """Each class's approval: ``preApproved``, ``ask`` or ``blocked``."""

    write: str
    delete: str
    read: str = "preApproved"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ApprovalPolicy":
        return cls(
            write=str(d["write"]),
            delete=str(d["delete"]),
            read=str(d.get("read", "preApproved")),
        )


@dataclass(frozen=True)
class ZonePolicy:
    """A zone's policy, as its config has it."""

    #: ``ro`` or ``rw``.
    access: str
    approval: ApprovalPolicy
    #: The names a worker may create (``None``: every name).
    suffixes: Optional[tuple[str, ...]]
    max_file_bytes: Optional[int]
    protect: tuple[str, ...]
    #: Patterns of paths hidden in the zone.
    hide: tuple[str, ...] = ()
    #: Patterns of paths whose reads wait for approval.
    ask_read: tuple[str, ...] = ()
    #: Sensitive roots hidden inside the backing dir, relative to it.
    hidden: tuple[str, ...] = ()
    #: Changes go to a stage until committed.
    staged: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ZonePolicy":
        suffixes = d.get("suffixes")
        mfb = d.get("max_file_bytes")
        return cls(
            access=str(d["access"]),
            approval=ApprovalPolicy.from_json(d["approval"]),
            suffixes=None if suffixes is None else _strs(suffixes),
            max_file_bytes=None if mfb is None else int(mfb),
            protect=_strs(d.get("protect")),
            hide=_strs(d.get("hide")),
            ask_read=_strs(d.get("ask_read")),
            hidden=_strs(d.get("hidden")),
            staged=bool(d.get("staged", False)),
        )


@dataclass(frozen=True)
class ZoneStatus:
    name: str
    backing: str
    policy: ZonePolicy
    #: Under ``run --isolate``: whether the zone is bound straight from its
    #: backing dir (``direct``) or served by the daemon, and why.
    isolate: Optional["IsolateRoute"] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ZoneStatus":
        iso = d.get("isolate")
        return cls(
            name=str(d["name"]),
            backing=str(d["backing"]),
            policy=ZonePolicy.from_json(d["policy"]),
            isolate=None
            if iso is None
            else IsolateRoute(direct=bool(iso["direct"]), why=str(iso["why"])),
        )


@dataclass(frozen=True)
class IsolateRoute:
    """How ``run --isolate`` gave a zone to its worker."""

    direct: bool
    why: str


@dataclass(frozen=True)
class IoStatus:
    """How file data moves: ``mode`` is ``passthrough`` or ``daemon``;
    ``transport`` how requests arrive (``dev-fuse`` or ``io-uring``);
    ``busy_poll_us`` how long a ``/dev/fuse`` thread polls for the next
    request after a reply (0: never); ``busy_poll_off`` why none polls now
    although ``busy_poll_us`` is above 0 (one CPU, or a CPU quota below
    the CPUs it may run on), None while polling may happen;
    ``idle_poll_held`` whether the daemon now keeps idle CPUs polling (it
    does while requests come close together), ``idle_poll_off`` why it
    can't (not root, no ``/dev/cpu_dma_latency``, ``--busy-poll 0``, busy
    polling held back), None while it may."""

    mode: str
    detail: str
    transport: Optional[str] = None
    transport_detail: Optional[str] = None
    busy_poll_us: Optional[int] = None
    busy_poll_off: Optional[str] = None
    idle_poll_held: Optional[bool] = None
    idle_poll_off: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "IoStatus":
        return cls(
            mode=str(d["mode"]),
            detail=str(d["detail"]),
            transport=_opt_str(d.get("transport")),
            transport_detail=_opt_str(d.get("transport_detail")),
            busy_poll_us=int(d["busy_poll_us"]) if d.get("busy_poll_us") is not None else None,
            busy_poll_off=_opt_str(d.get("busy_poll_off")),
            idle_poll_held=bool(d["idle_poll_held"]) if d.get("idle_poll_held") is not None else None,
            idle_poll_off=_opt_str(d.get("idle_poll_off")),
        )


@dataclass(frozen=True)
class CacheTtls:
    """How long the kernel may cache names and attributes, in seconds."""

    rw: float
    ro: float


@dataclass(frozen=True)
class RecentRefusal:
    """A refusal the filesystem gave, explained."""

    #: RFC 3339, UTC.
    time: str
    #: As the worker sees it (U+FFFD where not UTF-8; ``path_bytes`` exact).
    path: str
    #: The errno's name, e.g. ``EROFS``.
    errno: str
    reason: str
    message: str
    path_bytes: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RecentRefusal":
        return cls(
            time=str(d["time"]),
            path=str(d["path"]),
            errno=str(d["errno"]),
            reason=str(d["reason"]),
            message=str(d["message"]),
            path_bytes=exact(d, "path") or b"",
        )


@dataclass(frozen=True)
class Degraded:
    """Something the daemon could not use (``passthrough``,
    ``file_handles``), what would make it usable, and what that costs."""

    feature: str
    needs: str
    cost: str


@dataclass(frozen=True)
class WorkerBoundary:
    """What keeps ``run``'s worker from deciding for itself: ``kind`` is
    ``pid-namespace`` (``ns``: its inode), ``session`` (``why`` no
    namespace could be made) or ``isolate``."""

    kind: str
    ns: Optional[int] = None
    why: Optional[str] = None


@dataclass(frozen=True)
class Status:
    """A mount's status: what ``zonemount status`` shows."""

    mountpoint: str
    #: The daemon.
    pid: int
    #: Seconds since the epoch.
    started: int
    #: The project file; ``None``: the embedded default (or ``--zone``s alone).
    config: Optional[str]
    workers: tuple[str, ...]
    #: The ``--zone`` arguments as given.
    zone_args: tuple[str, ...]
    #: The control socket.
    control: str
    audit_log: Optional[str]
    approval_timeout_secs: int
    no_approvals: bool
    #: Who may use the control socket (besides root).
    owner_uid: int
    #: ``sandboxed`` or ``direct``.
    sandbox_mode: str
    zones: tuple[ZoneStatus, ...]
    pending: tuple[Request, ...]
    #: The broker's counters by name.
    counters: dict[str, int]
    io: Optional[IoStatus] = None
    cache_ttl_secs: Optional[CacheTtls] = None
    recent_refusals: tuple[RecentRefusal, ...] = ()
    #: What the daemon could not use (``None`` from older daemons).
    degraded: Optional[tuple[Degraded, ...]] = None
    #: Where the staged zones keep their changes (``None``: none staged).
    stage_dir: Optional[str] = None
    worker_boundary: Optional[WorkerBoundary] = None
    #: FUSE requests answered since the mount, by opcode name.
    fuse_requests: Optional[dict[str, int]] = None
    #: The object as received, for fields newer than this client.
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Status":
        try:
            io = d.get("io")
            ttl = d.get("cache_ttl_secs")
            degraded = d.get("degraded")
            wb = d.get("worker_boundary")
            return cls(
                mountpoint=str(d["mountpoint"]),
                pid=int(d["pid"]),
                started=int(d["started"]),
                config=_opt_str(d.get("config")),
                workers=_strs(d.get("workers")),
                zone_args=_strs(d.get("zone_args")),
                control=str(d["control"]),
                audit_log=_opt_str(d.get("audit_log")),
                approval_timeout_secs=int(d["approval_timeout_secs"]),
                no_approvals=bool(d["no_approvals"]),
                owner_uid=int(d["owner_uid"]),
                sandbox_mode=str(d["sandbox_mode"]),
                zones=tuple(ZoneStatus.from_json(z) for z in d["zones"]),
                pending=tuple(Request.from_json(r) for r in d["pending"]),
                counters={str(k): int(v) for k, v in d["counters"].items()},
                io=None if io is None else IoStatus.from_json(io),
                cache_ttl_secs=None
                if ttl is None
                else CacheTtls(rw=float(ttl["rw"]), ro=float(ttl["ro"])),
                recent_refusals=tuple(
                    RecentRefusal.from_json(r) for r in d.get("recent_refusals", [])
                ),
                degraded=None
                if degraded is None
                else tuple(
                    Degraded(feature=str(x["feature"]), needs=str(x["needs"]), cost=str(x["cost"]))
                    for x in degraded
                ),
                stage_dir=_opt_str(d.get("stage_dir")),
                fuse_requests=None
                if d.get("fuse_requests") is None
                else {str(k): int(v) for k, v in d["fuse_requests"].items()},
                worker_boundary=None
                if wb is None
                else WorkerBoundary(
                    kind=str(wb["kind"]),
                    ns=None if wb.get("ns") is None else int(wb["ns"]),
                    why=_opt_str(wb.get("why")),
                ),
                raw=d,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ProtocolError(f"a status the client can't read ({e!r})") from e
