"""A client for zonemount: find a mount's control socket, read its status,
watch and decide its approval requests, and run mounts that are always
unmounted.

>>> from zonemount import Client
>>> with Client.for_mount("/tmp/task-42") as c:        # doctest: +SKIP
...     for ev in c.watch():
...         if ev.kind == "request" and ev.request is not None:
...             c.allow(ev.request.id, "path")
"""

from ._client import (
    PROTOCOL_VERSION,
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
)
from ._escape import escape
from ._errors import CommandError, NotMountedError, ProtocolError, ZonemountError
from ._mount import Mount, binary, mount, run_cli
from ._registry import control_socket, find_record, runtime_dir

__all__ = [
    "PROTOCOL_VERSION",
    "Change",
    "Checkpoint",
    "Client",
    "Conflict",
    "CommandError",
    "Event",
    "Item",
    "Mount",
    "NotMountedError",
    "ProtocolError",
    "Request",
    "Scope",
    "ZoneChanges",
    "ZoneCheckpoints",
    "ZoneCommit",
    "ZoneRewind",
    "ZonemountError",
    "binary",
    "control_socket",
    "escape",
    "exact",
    "find_record",
    "mount",
    "run_cli",
    "runtime_dir",
]
