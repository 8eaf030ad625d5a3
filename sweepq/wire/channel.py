"""The message channel from a training process to its worker.

A SOCK_SEQPACKET socket pair: every message (messages.py) is one JSON object,
delivered whole or not at all, so a training process and a user program it
starts can share one end. The training process never writes the database while its
worker lives: it reports here, and the worker writes (fewer writers is the
honest answer to SQLite's single-writer rule).
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from sweepq.wire.messages import BadMessage, Message, decode, encode, excerpt

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

    def send(self, msg: Message) -> bool:
        if self.sock is None or self.broken:
            return False
        data = encode(msg)
        if len(data) > MAX_MESSAGE:  # cut, it would be rejected: the receipt file tells the rest
            print(f"sweepq: a {msg.kind!r} message of {len(data)} bytes was not sent", file=sys.stderr, flush=True)
            return False
        try:
            self.sock.send(data)
            return True
        except OSError:
            # The worker is gone (or wedged): the receipt file tells the rest.
            self.broken = True
            return False


@dataclass(frozen=True)
class Rejected:
    """A message that decode refused, kept so the worker can say so: why, and its first characters."""

    why: str
    excerpt: str = ""
    size: int = 0


MAX_AT_ONCE = 1000  # messages taken per call: a child that floods the channel never starves the worker's loop


def receive(sock: socket.socket) -> list[Message | Rejected]:
    """The messages waiting on a non-blocking worker end, at most MAX_AT_ONCE (empty list when none).

    Whatever a child writes is taken as untrusted bytes: one over MAX_MESSAGE (cut by the kernel,
    MSG_TRUNC) or that is not exactly a message is a Rejected, never an exception of the worker's.
    """
    out: list[Message | Rejected] = []
    while len(out) < MAX_AT_ONCE:
        try:
            data, _, flags, _ = sock.recvmsg(MAX_MESSAGE)
        except OSError:  # BlockingIOError included: nothing more waiting
            return out
        if not data:
            return out
        if flags & socket.MSG_TRUNC:
            why = f"not a message: longer than the channel's limit of {MAX_MESSAGE} bytes"
            out.append(Rejected(why, excerpt(data), len(data)))
            continue
        try:
            out.append(decode(data))
        except BadMessage as e:
            out.append(Rejected(str(e), excerpt(data), len(data)))
    return out
