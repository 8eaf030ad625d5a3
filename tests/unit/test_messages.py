"""The typed messages between a training process and its worker: round trips and explicit rejections."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sweepq.wire import channel
from sweepq.wire.messages import (
    KINDS,
    BadMessage,
    Checkpointed,
    Corrupt,
    Ended,
    Fresh,
    Logged,
    Message,
    Resumed,
    Started,
    Superseded,
    Total,
    Warned,
    decode,
    encode,
)
from sweepq.worker.progress import Progress

SAMPLES: list[Message] = [
    Started(pid=12, gpus=[{"index": 0, "name": "H100"}], environment={"python": "3.11"}, code_fingerprint={},
            data_fingerprint={"paths": []}),
    Resumed(step=15, sha="ab" * 32, path="checkpoints/step-15", epoch=1.5, metrics={"loss": 0.5}, rollback=True,
            best=0.9, best_step=10),
    Fresh(rollback=False, none_verified=True),
    Total(steps=400, epochs=None),
    Logged(step=3, epoch=0.25, scalars={"loss": 1.25, "lr": 3}, best=None, best_step=None),
    Checkpointed(step=20, epoch=None, metrics={}, path="checkpoints/step-20", sha="cd" * 32, size=4096,
                 created_at="2026-01-01T00:00:00Z", attempt=2),
    Superseded(steps=[5, 10], note="retention"),
    Corrupt(step=15, why="sha256 mismatch", moved_to="corrupt/step-15"),
    Warned(event="resumed_under_changes", step=15, notes=["code changed"]),
    Ended(outcome={"reason": "completed", "end_step": 40}),
]  # fmt: skip


def wire(msg: Message) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(encode(msg))
    return obj


def test_every_kind_has_a_sample() -> None:
    assert sorted(type(m).kind for m in SAMPLES) == sorted(KINDS)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).kind)
def test_round_trip(msg: Message) -> None:
    assert wire(msg)["t"] == type(msg).kind
    assert decode(encode(msg)) == msg


def test_non_finite_scalars_survive() -> None:
    back = decode(encode(Logged(step=1, epoch=None, scalars={"acc": float("inf")}, best=None, best_step=None)))
    assert isinstance(back, Logged) and back.scalars == {"acc": float("inf")}


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).kind)
def test_a_misspelt_field_is_rejected_by_name(msg: Message) -> None:
    obj = wire(msg)
    name = next(k for k in obj if k != "t")
    obj[name + "_"] = obj.pop(name)
    with pytest.raises(BadMessage, match=rf"missing {name}\b.*unknown {name}_"):
        decode(json.dumps(obj).encode())


def test_a_missing_field_is_rejected() -> None:
    obj = wire(Total(steps=4, epochs=None))
    del obj["epochs"]
    with pytest.raises(BadMessage, match="message 'total': missing epochs"):
        decode(json.dumps(obj).encode())


def test_an_extra_field_is_rejected() -> None:
    obj = {**wire(Fresh(rollback=True, none_verified=False)), "why": "x"}
    with pytest.raises(BadMessage, match="unknown why"):
        decode(json.dumps(obj).encode())


@pytest.mark.parametrize("kind", ["stats", None, 3])
def test_an_unknown_kind_is_rejected(kind: Any) -> None:
    with pytest.raises(BadMessage, match="unknown message kind"):
        decode(json.dumps({"t": kind, "step": 1}).encode())


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"t": "total", "steps": "40", "epochs": None}).encode(), "steps='40' is not"),
        (json.dumps({"t": "total", "steps": True, "epochs": None}).encode(), "steps=True is not"),
        (json.dumps({"t": "superseded", "steps": 5, "note": "x"}).encode(), "steps=5 is not"),
    ],
)
def test_wrong_shapes_and_types_are_rejected(data: bytes, why: str) -> None:
    with pytest.raises(BadMessage, match=why):
        decode(data)


def test_the_channel_delivers_typed_messages_and_reports_rejections() -> None:
    worker_end, child_end = channel.pair()
    try:
        worker_end.setblocking(False)
        sender = channel.Channel(child_end.detach())
        assert all(sender.send(m) for m in SAMPLES)
        child_end_sock = sender.sock
        assert child_end_sock is not None
        child_end_sock.send(json.dumps({"t": "log", "stepp": 1}).encode())
        got = channel.receive(worker_end)
    finally:
        worker_end.close()
        if sender.sock is not None:
            sender.sock.close()
    assert got[:-1] == SAMPLES
    assert isinstance(got[-1], channel.Rejected) and "unknown stepp" in got[-1].why


def test_the_worker_reads_every_kind() -> None:
    p = Progress()
    for msg in SAMPLES:
        p.take(msg)
    assert p.started["pid"] == 12 and p.started["start_step"] == 0  # Fresh came after Resumed
    assert p.fields["total_steps"] == 400 and p.fields["step"] == 3 and p.fields["best"] == 0.9
    assert [c.step for c in p.checkpoints] == [20] and p.newest_checkpoint == 20
    assert p.superseded[0].steps == [5, 10] and p.corrupt[0].why == "sha256 mismatch"
    assert "code changed" in p.notes and p.end == {"reason": "completed", "end_step": 40}
    p.take(channel.Rejected("message 'log': unknown stepp", '{"t": "log", "stepp": 3}', 23))
    why = "message 'log': unknown stepp"
    assert p.events[-1] == ("message_rejected", {"why": why, "excerpt": '{"t": "log", "stepp": 3}', "bytes": 23})
    assert p.rejected_words() == f"1 message on the channel was rejected: {why}"


def test_untrusted_bytes_are_rejected_by_name_without_recursion() -> None:
    """What a child writes to its channel is measured before any parser sees it (100,000 `[` made
    json's parser raise RecursionError in the worker); brackets inside strings do not count."""
    from sweepq.wire.messages import MAX_DEPTH, BadMessage, decode, nesting

    assert nesting(b"[" * 100_000) == MAX_DEPTH + 1
    assert nesting(b'{"a": "[[[[\\"[[[", "b": [[1]]}') == 3
    assert nesting(b'{"a": "\\\\", "b": [[[1]]]}') == 4  # an escaped backslash ends no string early
    for data, why in [
        (b"[" * 100_000, f"not a message: JSON nested deeper than {MAX_DEPTH} levels"),
        (b"\xff\xfe", "not JSON: "),
        (b'{"t": "' + b"x" * 100_000 + b'"}', "unknown message kind 'xxx"),
        (b'{"t": "total", "steps": ' + str(1 << 70).encode() + b', "epochs": null}', "message 'total': steps="),
    ]:
        with pytest.raises(BadMessage) as e:
            decode(data)
        assert str(e.value).startswith(why) and len(str(e.value)) < 300
