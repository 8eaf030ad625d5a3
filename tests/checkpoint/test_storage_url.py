"""`storage:` (and SWEEPQ_STORAGE_URL, --storage): how a sweep's checkpoint storage is written, chosen,
checked and opened (checkpoint/storage_url.py), and a sweep whose checkpoints live outside its root."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import textwrap
from pathlib import Path

import pytest
from conftest import HERE, cli, write

from sweepq.checkpoint import storage, storage_url
from sweepq.checkpoint.s3 import S3Checkpoints
from sweepq.checkpoint.storage import LocalFolder
from sweepq.checkpoint.storage_url import ENV_STORAGE, choose, problem
from sweepq.errors import SpecError, UsageError
from sweepq.layout import CellPaths
from sweepq.spec.sweep import parse_sweep

BASE = """\
name: s
train: m:f
grid: {lr: [1, 2]}
"""


def parse(extra: str, where: Path | None = None):
    return parse_sweep(BASE + textwrap.dedent(extra), str((where or Path("/sweeps")) / "sweep.yaml"))


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("storage: 3\n", "storage: expected a folder or an s3://bucket/prefix URL"),
        ("storage: 'gs://b/p'\n", "an S3-compatible bucket (s3://bucket/prefix), not gs://"),
        ("storage: 's3:///p'\n", "names no bucket"),
        ("storage: 's3://AKIA:secret@b/p'\n", "credentials do not belong in the storage URL"),
        ("storage: 's3://b/p?x=1'\n", "has a query or fragment"),
        ("storage: 'file://nas/x'\n", "names a host"),
        ("storage: 's3://b/${env:X}'\n", "is not a placeholder sweepq knows"),
        ("storage: ''\n", "it is empty"),
    ],
)
def test_a_bad_storage_is_refused_by_name(extra: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse(extra)
    assert words in str(caught.value)
    assert "secret" not in str(caught.value)


def test_storage_is_kept_as_written_a_relative_folder_made_the_files() -> None:
    assert parse("").settings.storage is None  # the root folder, as before the key
    url = "s3://bucket/sweeps/${envvar:USER}"
    assert parse(f"storage: '{url}'\n").settings.storage == url  # the placeholder stays
    assert parse("storage: ckpts\n", Path("/lab/sweeps")).settings.storage == "/lab/sweeps/ckpts"
    assert parse("storage: 'file:///mnt/nas/x'\n").settings.storage == "file:///mnt/nas/x"
    assert problem("${envvar:SCRATCH}/ckpts") is None


def test_the_command_line_wins_then_the_environment_then_the_file() -> None:
    env = {ENV_STORAGE: "s3://env/p"}
    assert choose("s3://cli/p", env, "s3://file/p").source == "--storage"  # type: ignore[union-attr]
    assert choose(None, env, "s3://file/p").raw == "s3://env/p"  # type: ignore[union-attr]
    chosen = choose(None, {}, "s3://file/p", "sweep.yaml")
    assert chosen is not None and chosen.source == "storage: in sweep.yaml"
    assert choose(None, {ENV_STORAGE: ""}, None) is None
    with pytest.raises(UsageError, match=r"SWEEPQ_STORAGE_URL: .* not azure://"):
        choose(None, {ENV_STORAGE: "azure://c/p"}, None)


def test_each_url_opens_its_backend(tmp_path: Path, s3_server, s3_bucket: str, monkeypatch) -> None:
    cell = CellPaths(tmp_path / "root", "1.2")
    here = storage.for_cell(cell, None, {})
    assert isinstance(here, LocalFolder) and here.folder == cell.checkpoints
    shared = tmp_path / "nas"
    for url in (str(shared), f"file://{shared}", "${envvar:NAS}"):
        there = storage.for_cell(cell, url, {"NAS": str(shared)})
        assert isinstance(there, LocalFolder)
        assert there.folder == shared / "cells" / "1.2" / "checkpoints"  # the root's layout in the folder
    with pytest.raises(UsageError, match=r"names \$\{envvar:NAS\}, but the environment variable NAS is not set"):
        storage.for_cell(cell, "${envvar:NAS}/x", {})
    # This process's SWEEPQ_STORAGE_URL (where its --storage went) comes before the sweep's.
    moved = storage.for_cell(cell, str(shared), {ENV_STORAGE: str(tmp_path / "other")})
    assert isinstance(moved, LocalFolder) and moved.folder.is_relative_to(tmp_path / "other")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)  # the standard AWS way: endpoint and credentials from the environment
    monkeypatch.setenv("BUCKET", s3_bucket)
    bucket = storage.for_cell(cell, "s3://${envvar:BUCKET}/team/sweep", dict(os.environ))
    assert isinstance(bucket, S3Checkpoints)
    assert bucket.bucket == s3_bucket and bucket.prefix == "team/sweep/cells/1.2/checkpoints"


SPEC = """
name: tiny
train: trainers:train
root: runs/tiny
params: {steps: 10}
checkpoint: {every_steps: 5, keep_last: 2}
metric: {name: score, goal: max}
grid: {seed: [1]}
"""


def _settings(root: Path) -> dict:
    with sqlite3.connect(root / "sweepq.db") as db:
        (text,) = db.execute("SELECT settings FROM sweep").fetchone()
    return json.loads(text) if isinstance(text, str) else text


@pytest.mark.process
def test_a_sweep_keeps_its_checkpoints_in_its_storage_folder(tmp_path: Path) -> None:
    shutil.copy(HERE / "trainers.py", tmp_path / "trainers.py")
    spec = write(tmp_path / "tiny.yaml", SPEC + "storage: ${envvar:SHARED}/ckpts\n")
    env = {**os.environ, "SHARED": str(tmp_path / "nas")}
    env.pop(ENV_STORAGE, None)
    r = cli("launch", str(spec), "--no-live", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    root = tmp_path / "runs" / "tiny"
    kept = storage.for_cell(CellPaths(root, "1.1"), "${envvar:SHARED}/ckpts", env)
    assert isinstance(kept, LocalFolder) and kept.folder == tmp_path / "nas" / "ckpts" / "cells" / "1.1" / "checkpoints"
    assert kept.steps() == [10, 5] and storage.verify(kept, 10)["step"] == 10
    assert not CellPaths(root, "1.1").checkpoints.exists()  # nothing in the root
    # Stored with the sweep as written (what a worker joining from elsewhere opens): no value filled in.
    assert _settings(root)["storage"] == "${envvar:SHARED}/ckpts"
    done = json.loads(CellPaths(root, "1.1").done.read_text())
    assert done["checkpoint"] == "checkpoints/step-10"  # named as in the root's layout
    assert done["checkpoint_manifest_sha256"] == kept.read_manifest(10)[1]
    # A relaunch trusts DONE.json against the manifest in the storage: nothing runs again.
    r = cli("launch", str(spec), "--no-live", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not CellPaths(root, "1.1").attempt_dir(2).exists()
    # A reset cell starts over: its checkpoints in the storage go too (the attic is the root's).
    r = cli("reset", "1.1", "--root", str(root), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert kept.steps() == []


@pytest.mark.process
def test_a_bad_storage_on_the_command_line_writes_nothing(tmp_path: Path) -> None:
    shutil.copy(HERE / "trainers.py", tmp_path / "trainers.py")
    spec = write(tmp_path / "tiny.yaml", SPEC)
    r = cli("launch", str(spec), "--no-live", "--storage", "gs://b/p", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--storage" in r.stderr and "not gs://" in r.stderr
    assert not (tmp_path / "runs").exists()
    r = cli("status", str(spec), "--storage", "s3://", cwd=tmp_path)
    assert r.returncode == 2 and "names no bucket" in r.stderr, r.stderr


def test_storage_url_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    heavy = "('boto3', 'torch', 'sqlalchemy')"
    code = f"import sys, sweepq.checkpoint.storage_url; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert storage_url.shown(None) == "the root folder"
