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
give the same bytes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from sweepq.history.records import CellHistory, Series

EVENTS_FILE = "events.out.tfevents.0000000000.sweepq"  # "tfevents" in the name is what TensorBoard looks for


@dataclass(frozen=True)
class CellRun:
    """What one cell's run is made of: its stitched history and its cfg."""

    history: CellHistory
    cfg: dict[str, Any]


def write_runs(folder: Path, runs: Iterable[CellRun], metric: str | None, goal: str = "max") -> int:
    """Write one run a cell into `folder` (which must exist); `metric`/`goal`: the sweep's. Returns points written."""
    runs = list(runs)
    hparams = [_hparams(r.cfg) for r in runs]
    types = _types(hparams)
    metrics = _metric_names(runs, metric)
    written = 0
    for i, (run, values) in enumerate(zip(runs, hparams, strict=True)):
        summaries = [_session_start(values, types, run.history)]
        if i == 0:
            summaries.insert(0, _experiment(types, _differing(hparams), metrics))
        written += _write_run(folder / run.history.cell, run.history, summaries, metric, goal)
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
    names = list(dict.fromkeys(m for r in runs for m in r.history.series))
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


def _session_start(values: dict[str, Any], types: dict[str, int], history: CellHistory) -> summary_pb2.Summary:
    times = [s.points[0].time for s in history.series.values() if s.points]
    info = plugin_data_pb2.SessionStartInfo(start_time_secs=min(times, default=0.0))
    for k, v in values.items():
        info.hparams[k].CopyFrom(_value(v, types[k]))
    return _summary(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=info))


def _best(series: Series, goal: str) -> tuple[int, float, float] | None:
    """(step, value, time) of the best finite kept value; the first of equals."""
    finite = [p for p in series.points if math.isfinite(p.value)]
    if not finite:
        return None
    p = (max if goal == "max" else min)(finite, key=lambda p: p.value)
    return p.step, p.value, p.time


def _write_run(
    folder: Path, history: CellHistory, summaries: list[summary_pb2.Summary], metric: str | None, goal: str
) -> int:
    folder.mkdir()
    start = min((s.points[0].time for s in history.series.values() if s.points), default=0.0)
    events = [event_pb2.Event(wall_time=start, file_version="brain.Event:2")]
    events += [event_pb2.Event(wall_time=start, step=0, summary=s) for s in summaries]
    scalars = [_scalar(name, p.step, p.value, p.time) for name, s in history.series.items() for p in s.points]
    events += sorted(scalars, key=lambda e: e.step)  # in step order, as training logged them
    best = _best(history.series[metric], goal) if metric in history.series else None
    if metric is not None and best is not None:
        events.append(_scalar(f"best/{metric}", *best))
    with open(folder / EVENTS_FILE, "wb") as f:
        writer = RecordWriter(f)
        for e in events:
            writer.write(e.SerializeToString())
        f.flush()
        os.fsync(f.fileno())
    return sum(len(s.points) for s in history.series.values())


def _scalar(tag: str, step: int, value: float, time: float) -> event_pb2.Event:
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(wall_time=time, step=step, summary=summary)
