"""The stitching done while reading (history/stream.py) against stitch.py's rule over the whole history in memory.

Real metrics.jsonl files in the format the history writer writes (format.header and
format.encode), for random cells: attempts that resume (some logging again the step
they resumed from, or a stretch before it), start from scratch, log nothing, log
metrics the others do not. Every logged value must come out once, in the same order
and with the same status and reason as stitch.py gives it; a history logged out of
order falls back to stitch.py itself. The reduced curves keep each bucket's extremes,
the first and last point and the checkpoints' points; out-of-range numbers are
skipped and counted, never passed on.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sweepq.history import format as fmt
from sweepq.history.format import AttemptFile
from sweepq.history.records import AttemptInfo, CheckpointMark, Status
from sweepq.history.stitch import stitch
from sweepq.history.stream import CellStream
from sweepq.layout import CellPaths

CELL = "1.1"


def write_attempt(root: Path, attempt: int, lines: list[tuple[int, dict[str, float]]]) -> None:
    path = CellPaths(root, CELL).metrics(attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(fmt.header(CELL, attempt))
        for i, (step, values) in enumerate(lines):
            line = fmt.encode(step, 1_700_000_000.0 + attempt * 1000 + i, values)
            if line is not None:
                f.write(line.encode() + b"\n")


def whole(root: Path, attempts: list[AttemptInfo], marks: list[CheckpointMark] = ()):  # type: ignore[assignment]
    logs = {}
    for a in attempts:
        logs[a.number] = tuple(AttemptFile(CellPaths(root, CELL).metrics(a.number), a.number).points())
    return stitch(CELL, attempts, logs, marks)


def random_cell(rng: random.Random, root: Path) -> list[AttemptInfo]:
    attempts = []
    step = 0
    for n in range(1, rng.randint(1, 6) + 1):
        kind = rng.choice(["resume", "resume", "again", "scratch", "empty", "before"])
        start = rng.randint(0, max(0, step)) if kind != "scratch" else 0
        resumed = kind in ("resume", "again", "before")
        first = start + (0 if kind == "again" else 1)
        if kind == "before":
            first = max(0, start - rng.randint(1, 5))
        count = 0 if kind == "empty" else rng.randint(1, 30)
        lines = []
        for s in range(first, first + count):
            values = {"loss": rng.random()}
            if rng.random() < 0.5:
                values["acc"] = rng.random()
            if n == 3 and rng.random() < 0.3:
                values["late"] = rng.random()
            lines.append((s, values))
        write_attempt(root, n, lines)
        attempts.append(AttemptInfo(n, rng.choice([None, "preempted", "lost", "completed"]), start, resumed))
        step = max(step, first + count - 1)
    return attempts


@pytest.mark.parametrize("seed", range(150))
def test_streamed_values_are_stitch_py_values_in_order(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    attempts = random_cell(rng, tmp_path)
    stream = CellStream(tmp_path, CELL, attempts)
    assert not stream.whole
    expected = list(whole(tmp_path, attempts).every_value())
    assert list(stream.values()) == expected
    assert stream.metrics == whole(tmp_path, attempts).metrics


def test_a_history_logged_out_of_order_is_stitched_whole(tmp_path: Path) -> None:
    write_attempt(tmp_path, 1, [(1, {"loss": 1.0}), (3, {"loss": 3.0}), (2, {"loss": 2.0}), (3, {"loss": 3.5})])
    attempts = [AttemptInfo(1, None, 0, False)]
    stream = CellStream(tmp_path, CELL, attempts)
    assert stream.whole
    values = list(stream.values())
    assert values == list(whole(tmp_path, attempts).every_value())
    assert [(p.step, p.value, status) for _, p, status, _ in values] == [
        (1, 1.0, Status.KEPT),
        (3, 3.0, Status.REPEATED),
        (2, 2.0, Status.KEPT),
        (3, 3.5, Status.KEPT),
    ]


def test_reduced_curves_keep_extremes_ends_and_checkpoints(tmp_path: Path) -> None:
    n = 10_000
    lines = [(s, {"loss": float((s * 7919) % 1000) if s != 4321 else 5000.0}) for s in range(1, n + 1)]
    write_attempt(tmp_path, 1, lines[:6000])
    write_attempt(tmp_path, 2, lines[5000:])  # resumed at 5000: attempt 1's 5001-6000 are its lost tail
    attempts = [AttemptInfo(1, "preempted", 0, False), AttemptInfo(2, "completed", 5000, True)]
    marks = [CheckpointMark(5000, 1, "committed"), CheckpointMark(7777, 2, "committed")]
    h = CellStream(tmp_path, CELL, attempts, marks).reduced(300)
    full = whole(tmp_path, attempts, marks)
    curve = h.series["loss"].points
    assert len(curve) <= 300 + 4
    assert [p.step for p in curve] == sorted({p.step for p in curve})
    assert curve[0] == full.series["loss"].points[0] and curve[-1] == full.series["loss"].points[-1]
    assert max(p.value for p in curve) == 5000.0 and min(p.value for p in curve) == 0.0  # the spike survives
    on_marks = {p.step: p for p in curve if p.step in (5000, 7777)}
    exact = {p.step: p for p in full.series["loss"].points}
    assert on_marks == {5000: exact[5000], 7777: exact[7777]}
    (tail,) = h.lost
    assert (tail.attempt, tail.reason, tail.points[0].step, tail.points[-1].step) == (1, "preempted", 5001, 6000)
    assert set(tail.points) <= set(full.lost[0].points) and len(tail.points) <= 304


def test_numbers_out_of_range_are_skipped_and_counted(tmp_path: Path) -> None:
    path = CellPaths(tmp_path, CELL).metrics(1)
    path.parent.mkdir(parents=True)
    lines = [
        {"step": 1, "time": 1.0, "values": {"loss": 1.0}},
        {"step": 10**26, "time": 2.0, "values": {"loss": 2.0}},  # a step no 64-bit integer holds
        {"step": 3, "time": 1e999, "values": {"loss": 3.0}},  # json reads 1e999 as infinity
        {"step": 4, "time": 4.0, "values": {"loss": 1e999, "acc": 0.5}},  # the bare number: dropped, acc kept
        {"step": 5, "time": 5.0, "values": {"loss": "Infinity"}},  # a logged infinity, as the writer spells it
        {"step": 6, "time": 6.0, "values": {"loss": 10**400}},
        {"step": 2**63 - 1, "time": 7.0, "values": {"loss": 7.0}},  # the largest step that is one
    ]
    text = "\n".join(json.dumps(line).replace("Infinity,", "1e999,").replace("Infinity}", "1e999}") for line in lines)
    text = text.replace('"1e999"', '"Infinity"')
    path.write_text(fmt.header(CELL, 1).decode() + text + "\n")
    f = AttemptFile(path, 1)
    got = [(p.step, p.time, p.values) for p in f.points()]
    assert got == [
        (1, 1.0, {"loss": 1.0}),
        (4, 4.0, {"acc": 0.5}),
        (5, 5.0, {"loss": float("inf")}),
        (6, 6.0, {}),
        (2**63 - 1, 7.0, {"loss": 7.0}),
    ]
    assert (f.out_of_range, f.damaged, f.torn) == (4, 0, False)
    stream = CellStream(tmp_path, CELL, [AttemptInfo(1, None, 0, False)])
    assert stream.out_of_range == {1: 4}


def test_lines_written_after_the_scan_are_left_to_the_next_reader(tmp_path: Path) -> None:
    """A running attempt's file grows while it is exported: what the scan did not weigh is not passed on."""
    write_attempt(tmp_path, 1, [(1, {"loss": 1.0}), (2, {"loss": 2.0})])
    stream = CellStream(tmp_path, CELL, [AttemptInfo(1, None, 0, False)])
    with open(CellPaths(tmp_path, CELL).metrics(1), "ab") as f:
        f.write(b'{"step":1,"time":5.0,"values":{"loss":9.0}}\n')  # step 1 again: out of order, unseen
    assert [(p.step, p.value, status) for _, p, status, _ in stream.values()] == [
        (1, 1.0, Status.KEPT),
        (2, 2.0, Status.KEPT),
    ]
    assert [p.step for p in stream.reduced(10).series["loss"].points] == [1, 2]
