"""A client for zonemount: find a mount's control socket, read its status
(typed), watch and decide its approval requests, check what a worker may
do, and run mounts (and commands in them) that are always unmounted.

>>> from zonemount import Client
>>> with Client.for_mount("/tmp/task-42") as c:        # doctest: +SKIP
...     for ev in c.watch():
...         if ev.kind == "request" and ev.request is not None:
...             c.allow(ev.request.id, "path")
"""

from ._client import (
    PROTOCOL_VERSION,
    Actor,
    Change,
    Checkpoint,
    Client,
    Conflict,
    Event,
    Item,
    Request,
    Scope,
    ZoneChanges,
    ZoneCheckpoints,
    ZoneCommit,
    ZoneRewind,
    exact,
    is_under,
)
from ._escape import escape
from ._errors import CommandError, NotMountedError, ProtocolError, ZonemountError
from ._mount import Check, Mount, Operation, binary, check, mount, run, run_cli
from ._status import (
    ApprovalPolicy,
    CacheTtls,
    Degraded,
    IoStatus,
    IsolateRoute,
    RecentRefusal,
    Status,
    WorkerBoundary,
    ZonePolicy,
    ZoneStatus,
)
from ._registry import control_socket, find_record, runtime_dir

__all__ = [
    "PROTOCOL_VERSION",
    "Actor",
    "ApprovalPolicy",
    "CacheTtls",
    "Change",
    "Check",
    "Checkpoint",
    "Client",
    "Conflict",
    "CommandError",
    "Degraded",
    "Event",
    "IoStatus",
    "IsolateRoute",
    "Item",
    "Mount",
    "NotMountedError",
    "Operation",
    "ProtocolError",
    "RecentRefusal",
    "Request",
    "Scope",
    "Status",
    "WorkerBoundary",
    "ZoneChanges",
    "ZoneCheckpoints",
    "ZoneCommit",
    "ZonePolicy",
    "ZoneRewind",
    "ZoneStatus",
    "ZonemountError",
    "binary",
    "check",
    "control_socket",
    "escape",
    "exact",
    "find_record",
    "is_under",
    "mount",
    "run",
    "run_cli",
    "runtime_dir",
]
