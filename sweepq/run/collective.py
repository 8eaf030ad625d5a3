"""The ranks of a `train:` cell of several processes agreeing: rank 0 decides, every rank hears it.

Under `processes: N` each rank runs `train(cfg, run)` with its own Run. The Runs agree through a
`torch.distributed.TCPStore` of their own, served by rank 0 on a port the attempt chose for it
(ENV_PORT, beside torchrun's MASTER_PORT): not through the default process group, which the user's
code may or may not create (`init_process_group("gloo")` for DDP) and which a group of sweepq's would
then collide with or depend on. A store is a few small messages on loopback, whatever the backend of
the user's tensors (gloo, NCCL) and whether there is one.

Every decision is one *sync*: the ranks meet at the same calls in the same order (`run.should_stop`,
`run.checkpoint`, `run.restore`, `run.finish`), each meeting numbered alike on every rank. Rank 0
publishes its answer under the meeting's number; the others wait for it. The last reader deletes the
key, so the store holds only the meetings some rank has not reached yet.

A stop signal that reached a rank other than 0 is posted under STOP_KEY before it waits: rank 0's
next answer to `should_stop` includes it, so every rank stops at the same step whichever rank heard
the signal.

A rank that dies leaves its peers blocked in `get` only until the attempt's watchdog ends them
(program/ranks.py: one attempt, one fate), which is why the store's own timeout is long.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sweepq.host import signals
from sweepq.program.ranks import ENV_STORE_PORT as ENV_PORT  # set by the attempt for a train: cell's ranks

STOP_KEY = "stop"
#: How long a rank waits at a meeting for rank 0 (or rank 0 for another rank's RNG states) before it
#: fails, naming the meeting: a dead peer is the watchdog's to handle within seconds, so this only
#: ends a rank whose peers never come (a meeting called on some ranks only); as torch's own
#: process groups wait 30 minutes by default.
STORE_TIMEOUT = timedelta(minutes=30)


class RanksDiverged(RuntimeError):
    """A rank waited at a meeting its peers never reached (a call made on some ranks only)."""


def from_env() -> Collective | None:
    """The ranks' store when this process is one of several ranks of a `train:` cell, else None."""
    port = os.environ.get(ENV_PORT)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not port or world <= 1:
        return None
    return Collective(int(os.environ.get("RANK", "0")), world, os.environ.get("MASTER_ADDR", "127.0.0.1"), int(port))


class Collective:
    def __init__(self, rank: int, world: int, host: str, port: int) -> None:
        self.rank = rank
        self.world = world
        # Rank 0 serves; the others connect (waiting for it to listen).
        self.store = dist.TCPStore(host, port, world, rank == 0, timeout=STORE_TIMEOUT, wait_for_workers=False)
        self._host, self._port = host, port
        self._side: dist.TCPStore | None = None  # the writer thread's connection (rng_handover)
        self._meeting = 0
        self._posted_stop = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def decide(self, answer: str | None) -> str:
        """Rank 0's `answer` on every rank (others pass None): one meeting."""
        self._meeting += 1
        key = f"m{self._meeting}"
        if self.rank == 0:
            assert answer is not None
            self.store.set(key, answer)
            return answer
        got = self._get(key, "rank 0").decode()
        self._read(key)
        return got

    def stop(self) -> bool:
        """`run.should_stop`: True on every rank at the same meeting once any rank heard a stop signal.

        The answer is the number of the signal heard ("0": none); a rank that did not hear it itself
        takes it as its own (signals.relay), so that its Run reports the stop as the others do.
        """
        heard = signals.first_signal() if signals.requested() else None
        if self.rank == 0:
            if heard is None and self.store.check([STOP_KEY]):
                heard = int(self.store.get(STOP_KEY))
            answer = int(self.decide(str(heard or 0)))
        else:
            if heard is not None and not self._posted_stop:
                self.store.set(STOP_KEY, str(heard))
                self._posted_stop = True
            answer = int(self.decide(None))
        if answer:
            signals.relay(answer)
        return bool(answer)

    def give_rng(self, rng: dict[str, Any]) -> None:
        """A rank other than 0, at a checkpoint every rank takes (the meeting just held): its RNG states."""
        self.store.set(f"rng{self._meeting}/{self.rank}", encode_rng(rng))

    def rng_handover(self) -> Callable[[], dict[str, Any]]:
        """Rank 0, at a checkpoint every rank takes: a call that waits for every other rank's RNG states
        (by rank: "1", ...), for the writer thread to make before it commits.

        Waited for there, not in the training loop: a rank that reaches the checkpoint later than rank 0
        (the ranks drift by a scheduler's slice between their collectives) costs rank 0's loop nothing.
        The writer thread asks through a connection of its own, so that the loop's meetings never
        queue behind its wait.
        """
        key, meeting = f"rng{self._meeting}", self._meeting

        def collect() -> dict[str, Any]:
            if self._side is None:
                self._side = dist.TCPStore(self._host, self._port, self.world, False, timeout=STORE_TIMEOUT)
            out = {}
            for r in range(1, self.world):
                name = f"{key}/{r}"
                out[str(r)] = decode_rng(self._get(name, f"rank {r}'s RNG states", self._side, meeting))
                self._side.delete_key(name)
            return out

        return collect

    def _get(self, key: str, what: str, store: dist.TCPStore | None = None, meeting: int | None = None) -> bytes:
        try:
            return (store or self.store).get(key)
        except dist.DistStoreError as e:
            raise RanksDiverged(
                f"rank {self.rank} waited {STORE_TIMEOUT} for {what} at meeting {meeting or self._meeting} of the "
                "ranks and it never came: run.restore, run.checkpoint and run.should_stop are meetings of every rank "
                "(call them at the same points on every rank, not under `if run.is_main:`)"
            ) from e

    def _read(self, key: str) -> None:
        """One reader more of `key`; the last one deletes it (rank 0 publishes and never reads)."""
        if self.world == 2 or self.store.add(f"{key}/read", 1) == self.world - 1:
            self.store.delete_key(key)
            if self.world > 2:
                self.store.delete_key(f"{key}/read")


def encode_rng(rng: dict[str, Any]) -> str:
    """capture_rng()'s states as JSON (nothing on the other side unpickles them)."""
    out: dict[str, Any] = {}
    if "python" in rng:
        version, internal, gauss = rng["python"]
        out["python"] = [version, list(internal), gauss]
    if "torch" in rng:
        out["torch"] = _b64(rng["torch"])
    if "numpy" in rng:
        name, keys, pos, has_gauss, cached = rng["numpy"]
        out["numpy"] = [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    if "cuda" in rng:
        out["cuda"] = [_b64(t) for t in rng["cuda"]]
    return json.dumps(out)


def decode_rng(raw: bytes | str) -> dict[str, Any]:
    """encode_rng's states as capture_rng() gives them (what a checkpoint's RNG entry holds)."""
    data = json.loads(raw)
    out: dict[str, Any] = {}
    if "python" in data:
        version, internal, gauss = data["python"]
        out["python"] = (version, tuple(internal), gauss)
    if "torch" in data:
        out["torch"] = _tensor(data["torch"])
    if "numpy" in data:
        import numpy as np

        name, keys, pos, has_gauss, cached = data["numpy"]
        out["numpy"] = (name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached)
    if "cuda" in data:
        out["cuda"] = [_tensor(t) for t in data["cuda"]]
    return out


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.contiguous().numpy().tobytes()).decode()


def _tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()


__all__ = ["ENV_PORT", "Collective", "decode_rng", "encode_rng", "from_env"]
