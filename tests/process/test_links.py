"""Links in a root never lead sweepq to change another sweep's files (issue 29): real launches, resets, repairs.

Another real root is launched once: its cell's committed checkpoint (tensors
of 12,015,744 bytes, larger than the deletion's 8 MiB shrinking step, as in
the report) is then linked into this sweep's roots the ways people and tools
do: a whole step (`checkpoints/step-10`, a warm start), a step folder whose
files are a symbolic link and a hard link to it, `.writing-*` and `.trash-*`
names, a linked `output/` or a link inside it, a linked attic, a linked
`checkpoints/` folder. Every test hashes every file of the other places
before and after (links not followed, their text compared) and checks that
the sweep still works or says plainly why it does not.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import cli, cli_json, env_with, write

pytestmark = pytest.mark.process

TRAINER = '''
import torch


def train(cfg, run):
    """A state of 3,000,000 floats (a 12,000,000-byte tensor file): one checkpoint each `every_steps`."""
    steps = int(cfg["steps"])
    state = {"w": torch.zeros(3_000_000), "step": 0}
    run.restore(state)
    run.set_total(steps)
    while state["step"] < steps:
        state["step"] += 1
        state["w"] += 1.0
        run.log(state["step"], loss=float(state["step"]))
        run.checkpoint(state, state["step"])
    return {"loss": float(state["w"][0])}
'''

SPEC = """
name: {name}
train: big:train
root: runs/{name}
params: {{steps: {steps}}}
checkpoint: {{every_steps: 10, keep_last: 1}}
grid: {{seed: {seeds}}}
"""
TENSORS = "tensors.safetensors"


def sweepq(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A sweepq command, its lines unwrapped (as a wide terminal shows them)."""
    return cli(*args, cwd=cwd, env=env_with(COLUMNS="1000"))


def spec(folder: Path, name: str, steps: int, seeds: list[int]) -> Path:
    return write(folder / f"{name}.yaml", SPEC.format(name=name, steps=steps, seeds=seeds))


def snapshot(folder: Path) -> dict[str, tuple[str, str]]:
    """Every name under `folder` (links not followed) -> (kind, sha256 of a file's bytes or a link's text)."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            key = str(p.relative_to(folder))
            if p.is_symlink():
                out[key] = ("link", os.readlink(p))
            elif p.is_dir():
                out[key] = ("dir", "")
            else:
                out[key] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another sweep's root, launched for real: its cell 1.1 done, its step-10 committed (never changed after)."""
    d = tmp_path_factory.mktemp("other")
    (d / "big.py").write_text(TRAINER)
    r = sweepq("launch", str(spec(d, "other", 10, [1])), "--workers", "1", "--no-live", cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    root = d / "runs" / "other"
    assert (root / "cells/1.1/checkpoints/step-10" / TENSORS).stat().st_size == 12_015_744
    return root


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    (tmp_path / "big.py").write_text(TRAINER)
    return tmp_path


def repaired(spec_file: Path) -> str:
    """The queue of a root that has cell folders and no database yet, made by `sweepq repair` from the files."""
    r = sweepq("repair", str(spec_file))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the old database was damaged: the file is missing" in r.stdout
    return r.stdout


def test_a_launch_never_changes_the_checkpoints_it_finds_linked(sweep_dir: Path, other: Path) -> None:
    warm = other / "cells/1.1/checkpoints/step-10"
    before = snapshot(other)
    ours = spec(sweep_dir, "ours", 40, [1, 2, 3])
    root = sweep_dir / "runs" / "ours"
    # 1.1: the whole step linked in (a warm start), and leftover names that are links.
    c1 = root / "cells/1.1/checkpoints"
    c1.mkdir(parents=True)
    (c1 / "step-10").symlink_to(warm)
    (c1 / ".writing-step-20-dead").symlink_to(warm)
    (c1 / ".trash-step-30-dead").symlink_to(warm / TENSORS)
    # 1.2: a step folder of its own whose tensor file is a symbolic link; 1.3: whose tensor file is a hard link.
    for cell, link in (("1.2", os.symlink), ("1.3", os.link)):
        step = root / "cells" / cell / "checkpoints/step-10"
        step.mkdir(parents=True)
        shutil.copy(warm / "manifest.json", step / "manifest.json")
        shutil.copy(warm / "state.json", step / "state.json")
        link(warm / TENSORS, step / TENSORS)

    assert "3 resumable: 1.1 (from step 10), 1.2 (from step 10), 1.3 (from step 10)\n" in repaired(ours)
    r = sweepq("launch", str(ours), "--workers", "2", "--no-live", cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 cells: 3 done" in r.stdout

    assert snapshot(other) == before  # not a byte, not a name of the other sweep changed
    assert (warm / TENSORS).stat().st_size == 12_015_744
    # Every cell resumed from the step it found (read through the links, verified) and finished on its own.
    for cell in ("1.1", "1.2", "1.3"):
        shown = cli_json("show", cell, "--root", str(root))
        assert shown["state"] == "done"
        assert [a["start_step"] for a in shown["attempts"]] == [10]
        assert (root / "cells" / cell / "checkpoints/step-40/manifest.json").is_file()
    # The linked step stays where the person put it, never counted by retention (keep_last 1 kept step-40 too).
    assert sorted(p.name for p in c1.iterdir()) == ["step-10", "step-40"] and (c1 / "step-10").is_symlink()
    # The cells' own step-10 folders were superseded: gone, their links with them, the files they named intact.
    for cell in ("1.2", "1.3"):
        assert sorted(p.name for p in (root / "cells" / cell / "checkpoints").iterdir()) == ["step-40"]
    note = (
        f"checkpoints/step-10 is a link to {warm}: a resume may load it (verified), but sweepq never counts or "
        "deletes a linked checkpoint, nor anything it points at; it stays in place"
    )
    shown = cli_json("show", "1.1", "--root", str(root))
    assert [e["detail"]["notes"] for e in shown["history"] if e["kind"] == "checkpoint_link_kept"] == [[note]]
    assert note in (shown["attempts"][0]["note"] or "")


def test_reset_and_repair_move_links_never_what_they_point_at(sweep_dir: Path, other: Path) -> None:
    warm = other / "cells/1.1/checkpoints/step-10"
    elsewhere = sweep_dir / "elsewhere"  # a third place: somebody's outputs, a damaged checkpoint, an attic
    (elsewhere / "outputs").mkdir(parents=True)
    (elsewhere / "outputs" / "model.bin").write_bytes(os.urandom(1 << 20))
    (elsewhere / "attic").mkdir()
    broken = elsewhere / "step-20"
    shutil.copytree(warm, broken)
    (broken / "manifest.json").write_text("{ not json")
    before, before_elsewhere = snapshot(other), snapshot(elsewhere)
    steer = spec(sweep_dir, "steer", 40, [1, 2])
    root = sweep_dir / "runs" / "steer"
    c1, c2 = root / "cells/1.1", root / "cells/1.2"
    (c1 / "checkpoints").mkdir(parents=True)
    (c1 / "checkpoints/step-10").symlink_to(warm)
    (c1 / "output").symlink_to(elsewhere / "outputs")
    (c2 / "output").mkdir(parents=True)
    (c2 / "output" / "model.bin").symlink_to(elsewhere / "outputs" / "model.bin")
    repaired(steer)

    # repair --force meets a linked step whose manifest is damaged: the link itself is moved aside.
    (c1 / "checkpoints/step-20").symlink_to(broken)
    r = sweepq("repair", str(steer), "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 resumable: 1.1 (from step 10)" in r.stdout and "1 queued: 1.2" in r.stdout
    (corrupt,) = [p for p in (c1 / "checkpoints").iterdir() if p.name.startswith(".corrupt-step-20-")]
    assert corrupt.is_symlink() and os.readlink(corrupt) == str(broken)

    # A linked attic: reset refuses before moving anything, and says why.
    (root / "attic").symlink_to(elsewhere / "attic")
    r = sweepq("reset", "1.1", "1.2", str(steer))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == (
        f"error: the attic is reached through a link: attic points to {elsewhere / 'attic'}. sweepq writes, moves "
        "and deletes only the root's own files, never through a link (the files it points at may be another "
        "sweep's). Replace the link with a real folder (move what it points at into attic if it is this sweep's), "
        "or put the whole root on the other disk; to warm-start a cell from another sweep, link single steps as "
        "checkpoints/step-N, which sweepq reads but never changes.\n"
    )
    assert (c1 / "checkpoints/step-10").is_symlink() and (c1 / "output").is_symlink()
    (root / "attic").unlink()

    # With the root's own attic, the links move into it as links.
    r = sweepq("reset", "1.1", "1.2", str(steer))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "reset: 1.1, 1.2\n"
    ((a1,), (a2,)) = [list((root / "attic" / c).iterdir()) for c in ("1.1", "1.2")]
    assert os.readlink(a1 / "checkpoints/step-10") == str(warm) and os.readlink(a1 / "output") == str(
        elsewhere / "outputs"
    )
    assert os.readlink(a2 / "output/model.bin") == str(elsewhere / "outputs/model.bin")
    assert not os.path.lexists(c1 / "output") and not os.path.lexists(c1 / "checkpoints")
    assert snapshot(other) == before and snapshot(elsewhere) == before_elsewhere
    assert all(p.exists() for p in (warm / TENSORS, elsewhere / "outputs/model.bin", broken / "manifest.json"))


def test_a_linked_checkpoints_folder_fails_its_cell_with_a_clear_word(sweep_dir: Path, other: Path) -> None:
    checkpoints = other / "cells/1.1/checkpoints"
    before = snapshot(other)
    linked = spec(sweep_dir, "linked", 40, [1])
    root = sweep_dir / "runs" / "linked"
    (root / "cells/1.1").mkdir(parents=True)
    (root / "cells/1.1/checkpoints").symlink_to(checkpoints)
    assert "1 resumable: 1.1 (from step 10)" in repaired(linked)  # reading through it is allowed
    r = sweepq("launch", str(linked), "--workers", "1", "--no-live", cwd=sweep_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert snapshot(other) == before
    (attempt,) = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert attempt["reason"] == "error"
    assert (
        attempt["error_tail"]
        .rstrip()
        .endswith(
            f"sweepq.ownfiles.LinkedPath: the checkpoints folder is reached through a link: cells/1.1/checkpoints "
            f"points to {checkpoints}. sweepq writes, moves and deletes only the root's own files, never through a "
            "link (the files it points at may be another sweep's). Replace the link with a real folder (move what it "
            "points at into cells/1.1/checkpoints if it is this sweep's), or put the whole root on the other disk; to "
            "warm-start a cell from another sweep, link single steps as checkpoints/step-N, which sweepq reads but "
            "never changes."
        )
    )
