"""The sweep's data model: what a parsed sweep file becomes.

Frozen dataclasses (`Sweep`, its `GroupSpec`s and `CellSpec`s, and the
`Settings` a worker runs cells with), the retry and cell-count defaults, and
`cfg_hash`, which names a cell's cfg. No parsing happens here; `sweepq.spec`
re-exports every name, and other modules import them from there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

#: Termination reasons that may carry a retry budget, with their defaults.
#: `preempted` never spends a budget; `completed` and `cancelled` end the cell.
DEFAULT_RETRIES: dict[str, int] = {
    "lost": 3,
    "oom": 1,
    "nan": 2,
    "error": 0,
    "data_error": 0,
    "timeout": 1,
}
DEFAULT_BACKOFF_SECONDS = 30.0
DEFAULT_BACKOFF_MAX_SECONDS = 1800.0
DEFAULT_MAX_CELLS = 10_000

DEFAULT_RENEW_SECONDS = 5.0
DEFAULT_EXPIRE_SECONDS = 30.0


@dataclass(frozen=True)
class LeaseTerms:
    """`lease:` of a sweep on a server database: renewed every `renew_seconds`, expired `expire_seconds`
    after the last renewal (in the database's clock)."""

    renew_seconds: float = DEFAULT_RENEW_SECONDS
    expire_seconds: float = DEFAULT_EXPIRE_SECONDS


Workdir = Literal["output", "sweep"]
DoneWhen = Literal["exit_zero", "reported"]
Start = Literal["fork", "fresh"]
#: `workdir:` of a program sweep: where its program runs (the first is the default).
WORKDIRS: dict[str, str] = {
    "output": "each cell runs in its own output folder, cells/<cell>/output/",
    "sweep": "every cell runs in the sweep file's folder, where relative outputs of cells running at once collide",
}
#: `done_when:` of a program sweep: what makes a cell done (the first is the default).
DONE_WHEN: dict[str, str] = {
    "exit_zero": "exit status 0 with no stop signal sweepq saw (a Run must call finish() or reach its total)",
    "reported": "only a completion the program reported: run.finish(), or its outcome file",
}

#: `start:`: how each attempt's process starts (the first is the default).
STARTS: dict[str, str] = {
    "fork": "a fork of the worker's template process, which imported sweepq, torch and the train module once",
    "fresh": "a new Python interpreter that imports them again (a second or more a cell)",
}


@dataclass(frozen=True)
class CheckpointPolicy:
    """`checkpoint:` in the grouped form.

    every_steps: commit when this many steps passed since the last commit (None: off).
    every_seconds: commit when this many seconds passed (None: off).
    auto: True when neither cadence was written; the runtime then derives the
        cadence from the measured cost of a checkpoint.
    keep_last: committed checkpoints kept besides the best and the final one.
    keep_best: also keep the best checkpoint by the sweep's metric.
    overlap: copy the tensors only the optimizer writes during the next
        forward/backward instead of before run.checkpoint returns (snapshot.py).
    """

    every_steps: int | None = None
    every_seconds: float | None = None
    auto: bool = True
    keep_last: int = 3
    keep_best: bool = True
    overlap: bool = True


@dataclass(frozen=True)
class Metric:
    name: str
    goal: Literal["max", "min"] = "max"


@dataclass(frozen=True)
class RetryPolicy:
    """Retries allowed per termination reason, and the back-off between them."""

    budgets: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_RETRIES))
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    backoff_max_seconds: float = DEFAULT_BACKOFF_MAX_SECONDS


@dataclass(frozen=True)
class Settings:
    """What a worker needs to run cells, JSON round-trippable (stored in the database)."""

    name: str
    form: Literal["grouped", "wandb"]
    spec_dir: str  # absolute folder of the sweep file: put on sys.path for `train:`
    train: str | None = None  # "module:function"
    program: str | None = None  # path as written (relative to spec_dir) for subprocess cells
    command: list[str] | None = None  # command template tokens (macros unrendered); None = default
    interpreter: str = "python"
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    metric: Metric | None = None
    retries: RetryPolicy = field(default_factory=RetryPolicy)
    max_attempt_seconds: float | None = None
    data: list[str] = field(default_factory=list)  # absolute paths of declared data
    workdir: Workdir = "output"  # where a program runs (WORKDIRS)
    done_when: DoneWhen = "exit_zero"  # what makes a program's cell done (DONE_WHEN)
    start: Start = "fork"  # how a train cell's attempt starts (STARTS)
    #: `resume_args:`: tokens added to the command of an attempt that resumes a cell an earlier attempt
    #: of it ran in the same working folder (a classic script's `--resume`); a group's list replaces it
    #: for that group's cells (keyed by the group's number, as text: JSON keys are text).
    resume_args: list[str] = field(default_factory=list)
    group_resume_args: dict[str, list[str]] = field(default_factory=dict)
    #: `inputs:`: files and folders of the sweep file's folder (as written, relative) that a program
    #: opens by a fixed relative name, linked into its working folder under `workdir: output`.
    inputs: list[str] = field(default_factory=list)
    #: `processes:`: how many ranks each attempt of a cell runs on its machine, with torchrun's
    #: environment (program/ranks.py); a group's number replaces it for that group's cells (keyed as above).
    processes: int = 1
    group_processes: dict[str, int] = field(default_factory=dict)
    #: `storage:` as chosen by the launch (`--storage`, SWEEPQ_STORAGE_URL, else the file's), placeholders
    #: unexpanded; None: the root folder. Stored with the sweep, so every worker opens the same storage
    #: (checkpoint/storage_url.py).
    storage: str | None = None
    #: `lease:`: stored with the sweep, so that a worker joining from another machine (`sweepq worker
    #: --database URL --sweep NAME`) renews and expires leases on the same terms as the launch's.
    lease: LeaseTerms = field(default_factory=LeaseTerms)

    def resume_args_of(self, cell: str) -> list[str]:
        """The resume arguments of `cell` ("G.I"): its group's, else the sweep's."""
        return self.group_resume_args.get(cell.split(".", 1)[0], self.resume_args)

    def most_processes(self) -> int:
        """The most ranks any cell's attempt runs: how many GPUs a worker takes."""
        return max([self.processes, *self.group_processes.values()])

    def processes_of(self, cell: str) -> int:
        """How many ranks an attempt of `cell` ("G.I") runs: its group's `processes:`, else the sweep's."""
        return self.group_processes.get(cell.split(".", 1)[0], self.processes)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Settings:
        d = dict(d)
        d["checkpoint"] = CheckpointPolicy(**d.get("checkpoint") or {})
        d["metric"] = Metric(**d["metric"]) if d.get("metric") else None
        d["retries"] = RetryPolicy(**d.get("retries") or {})
        d["lease"] = LeaseTerms(**d.get("lease") or {})
        return cls(**d)


@dataclass(frozen=True)
class GroupSpec:
    number: int  # 1-based position in the file
    name: str
    description: str | None = None


@dataclass(frozen=True)
class CellSpec:
    """A cell of the sweep file. Its cfg is a mapping, or what makes it when first asked for.

    The expansion gives each cell its hash and its cfg's JSON text from templates; a
    launch that only inserts new cells never needs the mappings (100,000 cost a second).
    """

    id: str  # "G.I"
    group: int  # G
    index: int  # I
    group_name: str
    made: dict[str, Any] | Callable[[], dict[str, Any]] = field(repr=False, compare=False)
    cfg_hash: str
    #: The cfg as `json.dumps` writes it, what the queue stores, where the expansion laid it out ("": encode it).
    cfg_json: str = field(default="", repr=False, compare=False)

    @property
    def cfg(self) -> dict[str, Any]:
        made = self.made
        if callable(made):
            made = made()
            object.__setattr__(self, "made", made)  # frozen: made once, then kept
        return made


@dataclass(frozen=True)
class Sweep:
    """A parsed sweep file. Its cells are expanded when first asked for, once.

    A relaunch of a file that is byte for byte the one last reconciled never asks
    (queue/reconcile.py, `plan_digest`): 100,000 cells cost seconds to expand.
    """

    path: Path  # the sweep file, absolute
    settings: Settings
    root: Path | None  # `root:` resolved against the file's folder; None if absent
    description: str | None
    groups: list[GroupSpec]
    expand: Callable[[], list[CellSpec]] = field(repr=False, compare=False)  # the cells, in run order
    #: The file's warnings: its text's from the parse, the expansion's (repeated cfgs) appended when it runs.
    notes: list[str] = field(default_factory=list)
    project: str | None = None  # W&B metadata, kept as is
    entity: str | None = None
    source_sha256: str = ""  # of the file's text: with the path, what says the file is unchanged
    #: `database:` as written (a SQLAlchemy URL, `${envvar:NAME}` unexpanded); None: the root's SQLite file.
    database: str | None = None
    lease: LeaseTerms = field(default_factory=LeaseTerms)
    slurm: Any = None  # `slurm:` (spec/slurm.py SlurmOptions): sbatch options for `launch --on slurm`

    @property
    def cells(self) -> list[CellSpec]:
        cells: list[CellSpec] | None = self.__dict__.get("_cells")
        if cells is None:
            cells = self.expand()
            object.__setattr__(self, "_cells", cells)  # frozen: the cache is no field
        return cells

    @property
    def expanded(self) -> bool:
        return "_cells" in self.__dict__

    @property
    def warnings(self) -> list[str]:
        """Every warning, the expansion's included (it expands the cells)."""
        return list(self.notes) if self.cells is not None else []

    @property
    def text_warnings(self) -> list[str]:
        """The warnings known without expanding: all of them once the cells are expanded."""
        return list(self.notes)


def cfg_hash(cfg: Mapping[str, Any]) -> str:
    """sha256 hex of the cfg's canonical JSON: sorted keys, no spaces, ASCII.

    Two cfgs hash alike exactly when their JSON texts are equal, so `1` and `1.0`
    (JSON `1` and `1.0`) or `true` and `1` hash differently, while key order
    does not matter.
    """
    import hashlib  # here: read commands never hash a cfg, and its OpenSSL costs them more than the rest of this module

    text = json.dumps(cfg, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()
