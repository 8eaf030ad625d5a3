"""Tidy tables of a sweep for exports: every logged value, every attempt, every cell with its cfg.

Pure: records and histories in, rows of plain strings out, in a stable order, so
that exporting the same sweep twice gives the same bytes. Numbers are written so
that they read back exactly (`repr` of a float), times in ISO-8601 UTC.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from sweepq.history.records import CellHistory, Status

if TYPE_CHECKING:
    from sweepq.history.stream import Value
    from sweepq.queue.records import AttemptRecord, CellRecord

METRICS_HEADER = ["cell", "attempt", "step", "name", "value", "time", "status", "reason"]
ATTEMPTS_HEADER = [
    "cell",
    "attempt",
    "reason",
    "start_step",
    "resumed",
    "end_step",
    "started_at",
    "ended_at",
    "wall_seconds",
    "gpu_seconds",
    "exit_code",
    "exit_signal",
    "peak_memory_bytes",
    "host",
    "worker",
    "values_logged",
    "values_lost",
    "note",
]
CELL_FIELDS = ["cell", "group", "state", "attempts", "last_reason", "step", "total_steps", "epoch"]


# A field a spreadsheet would read as a formula (OWASP's CSV injection): a metric name, a cfg value, an
# exception's note starting with one of these runs on open. Such a field is written after a single quote,
# which spreadsheets show as text; a number (-0.5, +1e-3, -inf) is left as it is, so it stays a number.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|inf|nan)")


def csv_cell(field: str) -> str:
    """`field` as a CSV export writes it: after a `'` when a spreadsheet would run it, else as it is."""
    if field.startswith(_FORMULA_START) and not _NUMBER.fullmatch(field):
        return "'" + field
    return field


def csv_row(row: Iterable[str]) -> list[str]:
    """Every field of `row` through `csv_cell` (the export's writer passes each row, header included)."""
    return [csv_cell(f) for f in row]


class _Rows:
    """A text file that `csv.writer` writes rows to, with lines ending in "\\n" (as the exports always have).

    The writer is told "\\r\\n": only then does Python's csv (before 3.12) quote a field holding a lone CR,
    which a reader would otherwise take for the end of the row; each row's own "\\r\\n" is then "\\n".
    """

    def __init__(self, f: IO[str]) -> None:
        self.f = f

    def write(self, line: str) -> int:
        return self.f.write(line[:-2] + "\n" if line.endswith("\r\n") else line)


def csv_writer(f: IO[str]) -> Any:
    """A `csv.writer` onto `f` (opened with newline=""): rows end in "\\n", a field with a CR or LF is quoted."""
    return csv.writer(_Rows(f), lineterminator="\r\n")


def text(v: Any) -> str:
    """One CSV field: empty for None, true/false, exact floats, ISO times, JSON for lists and mappings."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)
    return str(v)


def flat(d: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Nested mappings as dotted keys: {"opt": {"lr": 1}} -> {"<prefix>.opt.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}"
        if isinstance(v, dict) and v:
            out.update(flat(v, key))
        else:
            out[key] = v
    return out


def metric_rows(history: CellHistory) -> Iterator[list[str]]:
    """metrics.csv: every logged value once, by attempt and line; `reason` for lost ones (the attempt's)."""
    for value in history.every_value():
        yield value_row(history.cell, value)


def value_row(cell: str, value: Value) -> list[str]:
    """metrics.csv's row of one logged value, as `metric_rows` writes it (the export streams them)."""
    metric, p, status, reason = value
    return [
        cell,
        str(p.attempt),
        str(p.step),
        metric,
        text(p.value),
        text(p.time),
        str(status),
        text(reason) if status is Status.LOST else "",
    ]


def counts(history: CellHistory) -> dict[int, tuple[int, int]]:
    """Per attempt: (values it logged, values of them lost)."""
    logged: Counter[int] = Counter(p.attempt for _, p, _, _ in history.every_value())
    lost: Counter[int] = Counter(t.attempt for t in history.lost for _ in t.points)
    return {a: (n, lost[a]) for a, n in logged.items()}


def attempt_rows(
    attempts: Iterable[AttemptRecord], counted: dict[tuple[str, int], tuple[int, int]]
) -> Iterator[list[str]]:
    """attempts.csv: one row a receipt, in the order given; `counted`: (cell, attempt) -> `counts`."""
    for a in attempts:
        logged, lost = counted.get((a.cell, a.number), (0, 0))
        yield [
            text(v)
            for v in (
                a.cell,
                a.number,
                a.reason,
                a.start_step,
                a.start_checkpoint_sha is not None,
                a.end_step,
                a.started_at,
                a.ended_at,
                a.wall_seconds,
                a.gpu_seconds,
                a.exit_code,
                a.exit_signal,
                a.peak_memory_bytes,
                a.host,
                a.worker,
                logged,
                lost,
                a.note,
            )
        ]


def cell_table(cells: Iterable[CellRecord], metric: str | None) -> tuple[list[str], list[list[str]]]:
    """cells.csv: header and rows; every cfg key as `cfg.<key>`, every latest metric as `metrics.<name>`."""
    cells = list(cells)
    cfgs = [flat(c.result_cfg, "cfg") for c in cells]  # the cfg each result came from
    metrics = [flat(c.metrics or {}, "metrics") for c in cells]
    cfg_keys = sorted({k for d in cfgs for k in d})
    metric_keys = sorted({k for d in metrics for k in d})
    header = [*CELL_FIELDS, "metric", "best", "best_step", "finished_at", *cfg_keys, *metric_keys]
    rows = []
    for c, cfg, ms in zip(cells, cfgs, metrics, strict=True):
        fixed = [c.id, c.group_name, str(c.state), c.attempts, c.last_reason, c.step, c.total_steps, c.epoch]
        rows.append(
            [text(v) for v in fixed]
            + [text(metric), text(c.best), text(c.best_step), text(c.finished_at)]
            + [text(cfg.get(k)) for k in cfg_keys]
            + [text(ms.get(k)) for k in metric_keys]
        )
    return header, rows
