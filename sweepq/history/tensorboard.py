"""A sweep's stitched curves as TensorBoard runs: one folder a cell, its cfg as HParams, its results as metrics.

Each cell's run holds the kept points of its curves (one value a step, the
attempts stitched) at the step and wall time they were logged, and the HParams
plugin's session record (its cfg, nested keys dotted: `optim.lr`). The
dashboard's metric columns are the logged metrics (TensorBoard shows a run's
last value of each) and `best/<metric>` for the sweep's metric (written once, at
the step of the best kept value). The experiment record, which names every
hparam and metric, goes into the first run only: TensorBoard reads one.

Only `tensorboard`'s protos and record writer are used (no torch, no TensorFlow),
imported here only: the module is loaded by `sweepq export tensorboard` alone.
The files are written synchronously under fixed names, so the same histories
give the same bytes. A run's points are written as its history is read
(history/stream.py), in the order they were logged, through a spool file beside
the events file (the events that open a run need the time of its first point):
memory does not grow with a history's length.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from sweepq.history.records import Status
from sweepq.history.stream import CellStream

EVENTS_FILE = "events.out.tfevents.0000000000.sweepq"  # "tfevents" in the name is what TensorBoard looks for


@dataclass(frozen=True)
class CellRun:
    """What one cell's run is made of: its history (scanned, read again as it is written) and its cfg."""

    history: CellStream
    cfg: dict[str, Any]


def write_runs(folder: Path, runs: Iterable[CellRun], metric: str | None, goal: str = "max") -> int:
    """Write one run a cell into `folder` (which must exist); `metric`/`goal`: the sweep's. Returns points written."""
    runs = list(runs)  # scanned histories: a few numbers a metric each
    hparams = [_hparams(r.cfg) for r in runs]
    types = _types(hparams)
    metrics = _metric_names(runs, metric)
    written = 0
    for i, (run, values) in enumerate(zip(runs, hparams, strict=True)):
        experiment = _experiment(types, _differing(hparams), metrics) if i == 0 else None
        written += _write_run(folder / run.history.cell, run.history, values, types, experiment, metric, goal)
    return written


def flat(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: {"optim": {"lr": 1}} -> {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flat(v, key + "."))
        else:
            out[key] = v
    return out


def _hparams(cfg: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(flat(cfg).items()))


def _types(hparams: list[dict[str, Any]]) -> dict[str, int]:
    """One type a key over every cell: a key that is a number in one cell and text in another is text in all."""
    seen: dict[str, set[type]] = {}
    for values in hparams:
        for k, v in values.items():
            seen.setdefault(k, set()).add(_kind(v))
    kinds: dict[type, int] = {bool: api_pb2.DATA_TYPE_BOOL, float: api_pb2.DATA_TYPE_FLOAT64}
    return {
        k: kinds[next(iter(s))] if len(s) == 1 and str not in s else api_pb2.DATA_TYPE_STRING for k, s in seen.items()
    }


def _kind(v: Any) -> type:
    if isinstance(v, bool):
        return bool
    return float if isinstance(v, (int, float)) else str


def _value(v: Any, kind: int) -> Any:
    """The protobuf Value of one hparam, as its key's type (lists, mappings and None as JSON text)."""
    from google.protobuf import struct_pb2

    if kind == api_pb2.DATA_TYPE_BOOL:
        return struct_pb2.Value(bool_value=v)
    if kind == api_pb2.DATA_TYPE_FLOAT64:
        return struct_pb2.Value(number_value=v)
    return struct_pb2.Value(string_value=v if isinstance(v, str) else json.dumps(v, sort_keys=True))


def _metric_names(runs: list[CellRun], metric: str | None) -> list[str]:
    """Every logged metric, in first-logged order over the cells; `best/<metric>` first when any cell logged it."""
    names = list(dict.fromkeys(m for r in runs for m in r.history.metrics))
    return ([f"best/{metric}"] if metric in names else []) + names


def _summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> summary_pb2.Summary:
    data.version = metadata.PLUGIN_DATA_VERSION
    value = summary_pb2.Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR
    )
    return summary_pb2.Summary(value=[value])


def _differing(hparams: list[dict[str, Any]]) -> set[str]:
    """The keys whose values are not the same in every cell (the dashboard shows these first)."""
    keys = {k for values in hparams for k in values}
    return {k for k in keys if len({json.dumps(v.get(k, "<unset>"), sort_keys=True) for v in hparams}) > 1}


def _experiment(types: dict[str, int], differ: set[str], metrics: list[str]) -> summary_pb2.Summary:
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=k, type=t, differs=k in differ) for k, t in sorted(types.items())],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m)) for m in metrics],
    )
    return _summary(metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment))


def _session_start(values: dict[str, Any], types: dict[str, int], start: float) -> summary_pb2.Summary:
    info = plugin_data_pb2.SessionStartInfo(start_time_secs=start)
    for k, v in values.items():
        info.hparams[k].CopyFrom(_value(v, types[k]))
    return _summary(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=info))


def _write_run(
    folder: Path,
    history: CellStream,
    values: dict[str, Any],
    types: dict[str, int],
    experiment: summary_pb2.Summary | None,
    metric: str | None,
    goal: str,
) -> int:
    """The run's events: its opening (file version, experiment, session start at its first point's time), then
    every kept point as logged, then best/<metric>: the best finite kept value, the first of equals."""
    folder.mkdir()
    firsts: dict[str, tuple[int, float]] = {}  # metric -> (step, time) of its lowest kept step
    best: tuple[int, float, float] | None = None
    written = 0
    with tempfile.TemporaryFile(dir=folder) as spool:
        points = RecordWriter(spool)
        for name, p, status, _ in history.values():
            if status is not Status.KEPT:
                continue
            points.write(_scalar(name, p.step, p.value, p.time).SerializeToString())
            written += 1
            first = firsts.get(name)
            if first is None or p.step < first[0]:
                firsts[name] = (p.step, p.time)
            better = best is None or (p.value > best[1] if goal == "max" else p.value < best[1])
            if name == metric and math.isfinite(p.value) and better:
                best = (p.step, p.value, p.time)
        start = min((t for _, t in firsts.values()), default=0.0)
        opening = [event_pb2.Event(wall_time=start, file_version="brain.Event:2")]
        summaries = [s for s in (experiment, _session_start(values, types, start)) if s is not None]
        opening += [event_pb2.Event(wall_time=start, step=0, summary=s) for s in summaries]
        with open(folder / EVENTS_FILE, "wb") as f:
            writer = RecordWriter(f)
            for e in opening:
                writer.write(e.SerializeToString())
            f.flush()
            spool.seek(0)
            shutil.copyfileobj(spool, f, 1 << 20)
            if metric is not None and best is not None:
                writer.write(_scalar(f"best/{metric}", *best).SerializeToString())
            f.flush()
            os.fsync(f.fileno())
    return written


def _scalar(tag: str, step: int, value: float, time: float) -> event_pb2.Event:
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(wall_time=time, step=step, summary=summary)
