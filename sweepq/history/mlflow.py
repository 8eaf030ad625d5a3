"""A sweep's runs written through MLflow's own client: one parent run a sweep, one child run a cell.

Idempotent by finding what an earlier export wrote, not by remembering it. The
parent is the experiment's run tagged `sweepq.kind=sweep` with this sweep's name
and root folder (a root moved elsewhere is another sweep to MLflow); the children
are the runs tagged `mlflow.parentRunId=<parent>`, each known by its `sweepq.cell`
tag. A child whose `sweepq.digest` tag is the digest of what it should hold now is
left alone. Any other (the cell went on, a resume superseded points, an export
that stopped half-way: the digest is written last) is deleted and written again
whole, rather than updated: MLflow's params cannot change once logged and a point
cannot be taken out of a metric's history, so a curve whose tail was superseded
can only be rewritten. A deleted run is MLflow's soft delete: hidden from its
searches and UI until `mlflow gc` purges it. The parent holds no params or metrics
and is updated in place (tags, status). Two exports of one sweep at the same time
may each make a parent; later exports use one of them, always the same.

Everything goes in MLflow's batches (`log_batch`: at most 1000 metrics, 100 params
or 100 tags a call). MLflow is imported here only: this module is loaded by
`sweepq export mlflow` alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException

from sweepq.errors import SweepqError, UsageError
from sweepq.history.mlflow_runs import CELL, DIGEST, KIND, ROOT, SWEEP, TERMINATED, RunContent

PARENT = "mlflow.parentRunId"  # MLflow's own tag: its UI nests a run under this one
METRICS_PER_BATCH = 1000
PARAMS_PER_BATCH = 100  # and tags
PAGE = 1000

T = TypeVar("T")


class ExportStopped(SweepqError):
    """MLflow refused a write after the export began (what was written is kept; a rerun completes it)."""


@dataclass
class Written:
    """What an export did: runs written (new or rewritten), runs left as they were, the parent's id."""

    parent: str = ""
    written: int = 0
    unchanged: int = 0
    points: int = 0  # kept points the exported cells hold (written or already there)


def sqlite_file(uri: str) -> Path | None:
    """The database file a `sqlite:///` URI names (absolute), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").partition("?")[0]
    return Path(path).resolve() if path and path != ":memory:" else None


def absolute(uri: str) -> str:
    """`uri` with a relative sqlite path made absolute, so the line printed to view it works from anywhere."""
    path = sqlite_file(uri)
    if path is None:
        return uri
    query = uri.partition("?")[2]
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def connect(uri: str, experiment: str) -> tuple[MlflowClient, str]:
    """A client of the store at `uri` and the id of `experiment` (created if missing): the first contact."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # else a server's URL for every run
    try:
        path = sqlite_file(uri)
        if path is not None and (problem := _folder_problem(path.parent)):
            raise OSError(problem)
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)  # a new sqlite store is created and migrated here
        if found is None:
            return client, client.create_experiment(experiment)
    except Exception as e:  # whatever the store's driver raises: a refused URI is the user's to fix
        raise UsageError(
            f"cannot use the MLflow tracking store {uri}: {_cause(e)}. Name a store MLflow can open with "
            "--tracking-uri: sqlite:///PATH.db (a database file in a folder this user may write) or the "
            "http(s):// address of an MLflow tracking server."
        ) from e
    if found.lifecycle_stage != "active":
        raise UsageError(
            f"the MLflow experiment {experiment!r} in {uri} is deleted: restore it (mlflow experiments restore "
            f"--experiment-id {found.experiment_id}) or name another with --experiment."
        )
    return client, found.experiment_id


def write(client: MlflowClient, experiment: str, sweep: RunContent, cells: Iterable[RunContent]) -> Written:
    """The parent updated in place, then each cell's child left alone or written again whole."""
    try:
        done = Written(parent=_parent(client, experiment, sweep))
        children: dict[str, list[Run]] = {}
        for run in _search(client, experiment, f"tags.`{PARENT}` = '{done.parent}'"):
            children.setdefault(run.data.tags.get(CELL, ""), []).append(run)
        for content in cells:
            done.points += content.points
            old = children.get(content.tags[CELL], [])
            keep = next((r.info.run_id for r in old if r.data.tags.get(DIGEST) == content.digest), None)
            for r in old:
                if r.info.run_id != keep:
                    client.delete_run(r.info.run_id)
            if keep:
                done.unchanged += 1
            else:
                _child(client, experiment, done.parent, content)
                done.written += 1
        return done
    except MlflowException as e:
        raise ExportStopped(
            f"MLflow refused a write: {_cause(e)}. What was written is kept: run the same command again to "
            "write the rest (cells already written are left as they are)."
        ) from e


def _parent(client: MlflowClient, experiment: str, sweep: RunContent) -> str:
    found = sorted(
        (
            r
            for r in _search(client, experiment, f"tags.`{KIND}` = 'sweep'")
            if r.data.tags.get(SWEEP) == sweep.tags[SWEEP] and r.data.tags.get(ROOT) == sweep.tags[ROOT]
        ),
        key=lambda r: r.info.run_id,  # two only if two exports raced: always the same one
    )
    if found:
        run_id = found[0].info.run_id
    else:
        run_id = client.create_run(experiment, start_time=sweep.start_time, run_name=sweep.name).info.run_id
    for tags in _chunks([RunTag(k, v) for k, v in sweep.tags.items()], PARAMS_PER_BATCH):
        client.log_batch(run_id, tags=tags)
    _status(client, run_id, sweep)
    return run_id


def _child(client: MlflowClient, experiment: str, parent: str, content: RunContent) -> None:
    tags = {**content.tags, PARENT: parent}
    run_id = client.create_run(experiment, start_time=content.start_time, tags=tags, run_name=content.name).info.run_id
    for params in _chunks([Param(k, v) for k, v in content.params.items()], PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params)
    for metrics in _batches((Metric(*m) for m in content.metrics()), METRICS_PER_BATCH):  # as the files are read
        client.log_batch(run_id, metrics=metrics)
    _status(client, run_id, content)
    client.set_tag(run_id, DIGEST, content.digest)  # last: a run without it is unfinished, rewritten next time


def _status(client: MlflowClient, run_id: str, content: RunContent) -> None:
    if content.status in TERMINATED:
        client.set_terminated(run_id, content.status, end_time=content.end_time)
    else:
        client.update_run(run_id, status=content.status)


def _search(client: MlflowClient, experiment: str, where: str) -> Iterator[Run]:
    """Every active run of `experiment` matching `where`, page after page."""
    token = None
    while True:
        page = client.search_runs([experiment], where, max_results=PAGE, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _folder_problem(folder: Path) -> str | None:
    """Why a database file cannot be made in `folder` (SQLite also writes its journal beside it), if it cannot."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # MLflow creates the missing folders: the nearest existing one decides
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"this user may not write into {folder}"
    return None


def _cause(e: BaseException) -> str:
    """The first sentence of an error, short enough for one paragraph."""
    text = str(getattr(e, "message", None) or e).strip()
    first = re.split(r"(?<=[^.])\.\s", text.splitlines()[0] if text else "", maxsplit=1)[0].rstrip(".")
    first = first or type(e).__name__
    return first if len(first) <= 300 else first[:297] + "..."
