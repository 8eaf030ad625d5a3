"""The ranks' meetings (run/collective.py) over a real TCPStore on loopback, two ranks as two threads."""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import torch

from sweepq.checkpoint import serialize
from sweepq.program.ranks import free_port
from sweepq.run import collective
from sweepq.run.collective import Collective, RanksDiverged, decode_rng, encode_rng


def draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_a_ranks_rng_states_travel_as_json_and_restore_every_stream() -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draws()
    text = encode_rng(serialize.capture_rng())
    expected = draws()
    draws()  # move every stream on
    serialize.restore_rng(decode_rng(text.encode()))
    assert draws() == expected


def pair(port: int) -> tuple[Collective, Collective]:
    """Rank 0 serves, rank 1 connects (in a thread: it waits for the server)."""
    made: dict[int, Collective] = {}
    t = threading.Thread(target=lambda: made.__setitem__(1, Collective(1, 2, "127.0.0.1", port)))
    made[0] = Collective(0, 2, "127.0.0.1", port)
    t.start()
    t.join(timeout=30)
    return made[0], made[1]


def test_rank_0_decides_and_gathers_the_other_ranks_rng() -> None:
    zero, one = pair(free_port())
    heard: list[Any] = []
    follower = threading.Thread(target=lambda: heard.extend([one.decide(None), one.decide(None)]))
    follower.start()
    assert zero.decide("7") == "7" and zero.decide("-1") == "-1"
    follower.join(timeout=30)
    assert heard == ["7", "-1"]  # in order, one meeting each

    torch.manual_seed(42)
    states = serialize.capture_rng()
    zero.decide("1")
    collect = zero.rng_handover()  # made on rank 0's writer thread, whenever rank 1 gets there

    def rank_1() -> None:
        one.decide(None)
        one.give_rng(states)

    sent = threading.Thread(target=rank_1)
    sent.start()
    got = collect()
    sent.join(timeout=30)
    assert set(got) == {"1"} and torch.equal(got["1"]["torch"], states["torch"])
    left = [k for k in ("m1", "m2", "m3", "rng3/1") if zero.store.check([k])]
    assert left == []  # read keys are gone: the store does not grow with the steps


def test_a_meeting_that_some_rank_never_reaches_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collective, "STORE_TIMEOUT", timedelta(seconds=1))
    zero, one = pair(free_port())  # rank 0 lives but never comes (its call sat under `if run.is_main:`)
    with pytest.raises(RanksDiverged, match=r"rank 1 waited .* for rank 0 at meeting 1 .*same points on every rank"):
        one.decide(None)
    assert zero.world == 2  # rank 0's store served all along
