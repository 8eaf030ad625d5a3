"""A damaged sweepq.db: every command says so in one paragraph (exit 2), and `sweepq repair` rebuilds the queue.

The sweep is tiny_sweep.py's, finished, then made half-finished on disk the
way a crash leaves it: cell 1.1 done, cell 1.2 with its DONE.json and newest
checkpoint gone (resumable from step 5) and a later attempt folder (3) whose
receipt says it was preempted, and a cell 1.3 added to the file (never run).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tiny_sweep import SPEC, Ran, finished, sweepq_many

from sweepq.queue import liveness

GARBAGE = b"this is not a SQLite header: a disk, a tool or a person wrote over it " * 2
EVERY_COMMAND = {
    "status": ["status", "{spec}"],
    "status --json": ["status", "--root", "{root}", "--json"],
    "show": ["show", "1.1", "--root", "{root}"],
    "attempts": ["attempts", "--root", "{root}"],
    "report": ["report", "--root", "{root}"],
    "best": ["best", "--root", "{root}"],
    "launch": ["launch", "{spec}", "--no-live"],
    "worker": ["worker", "--root", "{root}"],
    "retry": ["retry", "1.1", "--root", "{root}"],
    "cancel": ["cancel", "1.1", "--root", "{root}"],
    "reset": ["reset", "1.1", "--root", "{root}"],
}
DAMAGES = {"garbage": 'SQLite says "file is not a database"', "truncated": "malformed", "emptied": "holds no queue"}


@pytest.fixture
def sweep(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    """The folder of tiny.yaml, its root half-finished as a crash leaves it (see the module)."""
    return half_finished(finished(tmp_path_factory), tmp_path / "sweep")


def half_finished(source: Path, d: Path) -> Path:
    shutil.copytree(source, d)
    cell = d / "runs" / "tiny" / "cells" / "1.2"
    (cell / "DONE.json").unlink()
    shutil.rmtree(cell / "checkpoints" / "step-10")
    shutil.copytree(cell / "attempts" / "1", cell / "attempts" / "3")
    receipt = json.loads((cell / "attempts" / "3" / "receipt.json").read_text())
    receipt.update(reason="preempted", start_step=5, end_step=5, note="SIGTERM received")
    (cell / "attempts" / "3" / "receipt.json").write_text(json.dumps(receipt))
    (d / "tiny.yaml").write_text(SPEC.replace("seed: [1, 2]", "seed: [1, 2, 3]"))
    return d


def damage(db: Path, how: str) -> None:
    if how == "garbage":
        with open(db, "r+b") as f:
            f.write(GARBAGE)
    elif how == "truncated":
        with open(db, "r+b") as f:
            f.truncate(db.stat().st_size // 2)
    else:
        db.write_bytes(b"")


def is_the_paragraph(r: Ran, db: Path) -> bool:
    text = r.stderr.strip()
    return (
        r.code == 2
        and text.startswith(f"error: the database at {db} is damaged: ")
        and "\n" not in text
        and "checkpoints and DONE.json files are kept outside it and are intact" in text
        and f"`sweepq repair SPEC --root {db.parent}`" in text
    )


def test_every_command_says_what_happened_and_what_to_do(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Each way of damage on its own copy; all the commands on all copies in one process (the suite's time)."""
    commands, dbs = {}, {}
    for how in DAMAGES:
        d = half_finished(finished(tmp_path_factory), tmp_path / how)
        dbs[how] = d / "runs" / "tiny" / "sweepq.db"
        damage(dbs[how], how)
        where = {"spec": str(d / "tiny.yaml"), "root": str(dbs[how].parent)}
        for name, args in EVERY_COMMAND.items():
            commands[f"{how}: {name}"] = [a.format(**where) for a in args]
    before = {how: db.read_bytes() for how, db in dbs.items()}
    ran = sweepq_many(commands)
    for name, r in ran.items():
        assert is_the_paragraph(r, dbs[name.split(":")[0]]), f"{name}: exit {r.code}: {r.stderr}"
    for how, db in dbs.items():
        assert DAMAGES[how] in ran[f"{how}: status"].stderr
        assert db.read_bytes() == before[how], f"{how}: the damaged file was written"
        assert not any(db.parent.glob("sweepq.db?*")), f"{how}: a file appeared beside it"


def test_repair_then_launch_finishes_without_training_anything_twice(sweep: Path) -> None:
    root = sweep / "runs" / "tiny"
    db = root / "sweepq.db"
    damage(db, "garbage")
    damaged = db.read_bytes()
    done_11 = (root / "cells" / "1.1" / "DONE.json").read_bytes()
    receipts_12 = {n: (root / "cells" / "1.2" / "attempts" / n / "receipt.json").read_bytes() for n in ("1", "3")}

    first = sweepq_many(
        {
            "root only": ["repair", "runs/tiny"],
            "repair": ["repair", "tiny.yaml"],
            "again": ["repair", "tiny.yaml"],
            "status": ["status", "tiny.yaml", "--json"],
        },
        cwd=sweep,
    )
    only = first["root only"]
    assert only.code == 2 and "needs the sweep file" in only.stderr and "repair SPEC --root" in only.stderr
    repair = first["repair"]
    assert repair.code == 0, repair.stderr
    (aside,) = root.glob("sweepq.db.damaged-*")
    assert aside.read_bytes() == damaged  # moved aside, never deleted
    assert f"moved to runs/tiny/{aside.name}" in repair.stdout
    assert "1 done: 1.1" in repair.stdout and "1 resumable: 1.2 (from step 5)" in repair.stdout
    assert "1 queued: 1.3" in repair.stdout and "3 earlier attempt(s) recorded" in repair.stdout
    again = first["again"]
    assert again.code == 2 and "is not damaged" in again.stderr and "--force" in again.stderr
    states = {c["cell"]: (c["state"], c["step"], c["attempts"]) for c in json.loads(first["status"].stdout)}
    assert states == {"1.1": ("done", 10, 1), "1.2": ("interrupted", 5, 3), "1.3": ("queued", None, 0)}

    second = sweepq_many(
        {
            "launch": ["launch", "tiny.yaml", "--no-live"],
            "status": ["status", "tiny.yaml", "--json"],
            "attempts": ["attempts", "--root", "runs/tiny", "--json"],
        },
        cwd=sweep,
    )
    assert second["launch"].code == 0, second["launch"].stdout + second["launch"].stderr
    assert {c["cell"]: c["state"] for c in json.loads(second["status"].stdout)} == dict.fromkeys(
        ("1.1", "1.2", "1.3"), "done"
    )
    attempts: dict[str, list[dict]] = {}
    for a in sorted(json.loads(second["attempts"].stdout), key=lambda a: a["number"]):
        attempts.setdefault(a["cell"], []).append(a)
    # 1.1 was not trained again; its old attempt is on record, as recovered.
    assert [(a["number"], a["reason"]) for a in attempts["1.1"]] == [(1, "completed")]
    assert "recovered from disk by repair" in attempts["1.1"][0]["note"]
    assert (root / "cells" / "1.1" / "DONE.json").read_bytes() == done_11
    # 1.2 resumed from its checkpoint in an attempt numbered above every old folder; old receipts untouched.
    assert [(a["number"], a["reason"]) for a in attempts["1.2"]] == [
        (1, "completed"),
        (3, "preempted"),
        (4, "completed"),
    ]
    assert attempts["1.2"][2]["start_step"] == 5 and attempts["1.2"][2]["end_step"] == 10
    assert "recovered from disk by repair" in attempts["1.2"][1]["note"]
    assert json.loads((root / "cells" / "1.2" / "attempts" / "4" / "receipt.json").read_text())["start_step"] == 5
    for n, before in receipts_12.items():
        assert (root / "cells" / "1.2" / "attempts" / n / "receipt.json").read_bytes() == before
    assert [(a["number"], a["start_step"]) for a in attempts["1.3"]] == [(1, 0)]


def test_repair_refuses_while_a_live_process_owns_a_cell(sweep: Path) -> None:
    root = sweep / "runs" / "tiny"
    damage(root / "sweepq.db", "garbage")
    owner = liveness.for_root(root).take("1.1")  # this process: alive while the repair runs
    assert owner is not None
    try:
        r = sweepq_many({"repair": ["repair", "tiny.yaml"]}, cwd=sweep)["repair"]
    finally:
        owner.release()
    assert r.code == 2 and "cell 1.1" in r.stderr and "owned by a live process" in r.stderr
    assert (root / "sweepq.db").read_bytes().startswith(GARBAGE)  # not moved
    assert not any(root.glob("sweepq.db.*"))
