"""The exceptions the client raises; each carries a one-line message."""

from __future__ import annotations


class ZonemountError(Exception):
    """Something zonemount refused or failed; ``str(e)`` is its one line
    (the daemon's own message when the daemon answered)."""


class NotMountedError(ZonemountError):
    """No zonemount mount is recorded at that path for this user."""


class ProtocolError(ZonemountError):
    """The daemon speaks another protocol version, or sent something that
    isn't the protocol."""


class CommandError(ZonemountError):
    """The ``zonemount`` binary exited non-zero; ``returncode`` is its exit
    status (see the README's exit-status table)."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode
