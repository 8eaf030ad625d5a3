"""Metric history: every `run.log` point of every attempt, and each cell's curves stitched across resumes.

Written by the training process (writer.py, one metrics.jsonl per attempt, see
format.py); read by the read and export commands (read.py, stitch.py). Nothing
here imports torch, and the queue's engine is loaded only when a reader opens it.

    from sweepq.history import stitched
    h = stitched(root, "2.3")
    h.series["loss"].steps, h.series["loss"].values   # the curve: each step once
    for tail in h.lost_of("loss"): tail.attempt, tail.reason, tail.points

A history too long for memory is read as a CellStream (stream.py, `streams(store)`):
each value with its status as the files are read, or curves cut per step bucket.
"""

from sweepq.history.format import HistoryTooNew, read_attempt
from sweepq.history.read import attempt_log, stitched, stitched_all, streams
from sweepq.history.records import (
    AttemptInfo,
    AttemptLog,
    CellHistory,
    CheckpointMark,
    Logged,
    LostTail,
    Point,
    Series,
    Status,
)
from sweepq.history.stitch import stitch
from sweepq.history.stream import CellStream

__all__ = [
    "AttemptInfo",
    "AttemptLog",
    "CellHistory",
    "CellStream",
    "CheckpointMark",
    "HistoryTooNew",
    "Logged",
    "LostTail",
    "Point",
    "Series",
    "Status",
    "attempt_log",
    "read_attempt",
    "stitch",
    "stitched",
    "stitched_all",
    "streams",
]
