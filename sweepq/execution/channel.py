"""The message channel from a training process to its worker.

A SOCK_SEQPACKET socket pair: every message is one JSON object, delivered
whole or not at all, so a training process and a user program it starts can
share one end. The training process never writes the database while its
worker lives: it reports here, and the worker writes (fewer writers is the
honest answer to SQLite's single-writer rule).
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

ENV_FD = "SWEEPQ_CHANNEL_FD"
MAX_MESSAGE = 1 << 20


def pair() -> tuple[socket.socket, socket.socket]:
    """(worker end, child end); the child end is inheritable for pass_fds."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.set_inheritable(True)
    return a, b


class Channel:
    """The sending end; silent when there is no worker (tests, orphans)."""

    def __init__(self, fd: int | None) -> None:
        self.sock: socket.socket | None = None
        self.broken = False
        if fd is not None:
            self.sock = socket.socket(fileno=fd)
            self.sock.settimeout(30.0)

    @classmethod
    def from_env(cls) -> Channel:
        fd = os.environ.get(ENV_FD)
        return cls(int(fd) if fd else None)

    def send(self, kind: str, **fields: Any) -> bool:
        if self.sock is None or self.broken:
            return False
        data = json.dumps({"t": kind, **fields}, default=str, allow_nan=True).encode()
        try:
            self.sock.send(data[:MAX_MESSAGE])
            return True
        except OSError:
            # The worker is gone (or wedged): the receipt file tells the rest.
            self.broken = True
            return False


def receive(sock: socket.socket) -> list[dict[str, Any]]:
    """Every message waiting on a non-blocking worker end (empty list when none)."""
    out = []
    while True:
        try:
            data = sock.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            return out
        except OSError:
            return out
        if not data:
            return out
        try:
            out.append(json.loads(data))
        except ValueError:
            continue
