"""The messages between a worker and its template process (worker/template.py), typed.

One JSON object a SOCK_SEQPACKET message; a `Spawn` carries its descriptors beside it (SCM_RIGHTS),
named by their index in that list. Nothing here imports torch or the database.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_MESSAGE = 1 << 20
MAX_FDS = 16


@dataclass(frozen=True)
class Ready:
    """The template imported what attempts need (`ok`), or says why attempts must start fresh."""

    ok: bool
    why: str | None = None
    seconds: float | None = None  # what the imports took: what each attempt no longer pays


@dataclass(frozen=True)
class Spawn:
    """Start one attempt: `python -m sweepq.attempt <attempt_file>`, as a fork."""

    attempt_file: str
    cwd: str
    env: dict[str, str]
    stdout: int  # indexes into the descriptors sent with the message
    stderr: int
    inherit: list[int] = field(default_factory=list)  # passed on, as pass_fds does
    fd_env: dict[str, int] = field(default_factory=dict)  # variables that name a descriptor, renumbered


@dataclass(frozen=True)
class Spawned:
    pid: int


@dataclass(frozen=True)
class Declined:
    """The template will not fork this attempt (its code changed on disk); it exits after saying so."""

    why: str


KINDS: dict[str, type[Any]] = {k.__name__: k for k in (Ready, Spawn, Spawned, Declined)}
Message = Ready | Spawn | Spawned | Declined


def send(sock: socket.socket, msg: Message, fds: list[int] | None = None) -> None:
    data = json.dumps({"kind": type(msg).__name__, **asdict(msg)}).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[Message | None, list[int]]:
    """The next message and its descriptors; (None, []) when the other end is gone."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    except (ConnectionError, OSError):
        return None, []
    if not data:
        return None, fds
    raw = json.loads(data)
    kind = KINDS.get(raw.pop("kind", None))
    if kind is None:
        raise ValueError(f"unknown template message: {data[:200]!r}")
    return kind(**raw), fds
