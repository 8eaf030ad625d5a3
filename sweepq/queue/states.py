"""The cell state machine and the termination reasons: the one place that defines them.

Every change of a cell's state in the database goes through `check` (or the
guarded UPDATE in store.py built from `sources_of`), so an illegal transition is
an exception, never a silent overwrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from sweepq.errors import IllegalTransition


class CellState(StrEnum):
    QUEUED = "queued"  # waiting for a worker; claimed in cell order (after interrupted cells)
    RUNNING = "running"  # an attempt owns it; the cell's file lock proves its process lives
    INTERRUPTED = "interrupted"  # its attempt stopped before the end; claimed first, resumes
    DONE = "done"  # DONE.json is written and verifies
    FAILED = "failed"  # a retry budget is spent; `sweepq retry` requeues it
    CANCELLED = "cancelled"  # the user gave up on it; `sweepq retry` requeues it


class Reason(StrEnum):
    """How an attempt ended: exactly one per attempt."""

    COMPLETED = "completed"  # train returned; DONE.json written
    PREEMPTED = "preempted"  # a signal arrived; an emergency checkpoint was written
    LOST = "lost"  # the process vanished (kill -9, reboot, power)
    OOM = "oom"  # out of memory: MemoryError, CUDA OOM, or the kernel's OOM killer
    NAN = "nan"  # a non-finite loss was logged or checkpointed
    ERROR = "error"  # an exception in the training code
    DATA_ERROR = "data_error"  # the training code raised sweepq.DataError
    TIMEOUT = "timeout"  # the attempt ran past max_attempt_seconds
    CANCELLED = "cancelled"  # the user cancelled the cell
    DISK_FULL = "disk_full"  # out of disk space or quota, or a file system remounted read-only
    LOG_FLOOD = "log_flood"  # printed past SWEEPQ_LOG_FLOOD bytes: stopped (its logs keep their head and tail)


class CheckpointState(StrEnum):
    """A checkpoint row's state; *writing* checkpoints are never in the database."""

    COMMITTED = "committed"  # on disk, verified when written
    SUPERSEDED = "superseded"  # deleted by retention or abandoned by a resume from an earlier step
    CORRUPT = "corrupt"  # failed verification on restore; moved aside


TERMINAL = frozenset({CellState.DONE, CellState.FAILED, CellState.CANCELLED})
CLAIMABLE = (CellState.INTERRUPTED, CellState.QUEUED)  # claim order: interrupted first
#: The cells that still take a worker: those claimable and those running (the rest are settled).
UNSETTLED = frozenset({CellState.RUNNING, *CLAIMABLE})

#: The column of a cell removed from its sweep file; every other cell is live (still in the sweep).
REMOVED = "removed"
#: Cell order, by column: by group, then by index within the group. Claims take cells in it (interrupted
#: ones first: CLAIMABLE), listings show them in it; ix_cells_claim and ix_cells_order hold it.
CELL_ORDER = ("group_number", "index")


def claim_rank(state: CellState, group: int, index: int) -> tuple[int, int, int]:
    """A claimable cell's place in claim order: its state's in CLAIMABLE (interrupted first), then cell
    order (group, then index). The forecast's, in Python; claims take the same order in one SQL statement
    (claim.py's `claim_pick`), and a unit test holds the two equal."""
    return (CLAIMABLE.index(state), group, index)


# Transitions made by workers while a sweep runs. Terminal states have none:
# only an explicit user command (see USER_TRANSITIONS) or a verified DONE.json
# (see REPAIR_TRANSITIONS) may move a terminal cell.
TRANSITIONS: dict[CellState, frozenset[CellState]] = {
    CellState.QUEUED: frozenset({CellState.RUNNING, CellState.CANCELLED}),
    CellState.RUNNING: frozenset(
        {
            CellState.DONE,
            CellState.FAILED,
            CellState.INTERRUPTED,
            CellState.QUEUED,  # a retry waiting out its back-off
            CellState.CANCELLED,
        }
    ),
    CellState.INTERRUPTED: frozenset({CellState.RUNNING, CellState.CANCELLED}),
    CellState.DONE: frozenset(),
    CellState.FAILED: frozenset(),
    CellState.CANCELLED: frozenset(),
}

# `sweepq retry` and `sweepq reset` reopen cells; a running cell must be cancelled first.
USER_TRANSITIONS: dict[str, dict[CellState, frozenset[CellState]]] = {
    "retry": {CellState.QUEUED: frozenset({CellState.FAILED, CellState.CANCELLED})},
    "reset": {
        CellState.QUEUED: frozenset(
            {
                CellState.QUEUED,
                CellState.INTERRUPTED,
                CellState.DONE,
                CellState.FAILED,
                CellState.CANCELLED,
            }
        )
    },
    "cancel": {CellState.CANCELLED: frozenset({CellState.QUEUED, CellState.INTERRUPTED})},
}

# A DONE.json that verifies wins over the database (the marker is written first).
REPAIR_TRANSITIONS: dict[CellState, frozenset[CellState]] = {
    CellState.DONE: frozenset({CellState.QUEUED, CellState.INTERRUPTED, CellState.FAILED, CellState.CANCELLED}),
    # A DONE marker that vanished or no longer verifies: the cell is not done.
    CellState.QUEUED: frozenset({CellState.DONE}),
}


def sources_of(target: CellState, table: dict[CellState, frozenset[CellState]] | None = None) -> frozenset[CellState]:
    """States from which `target` may be reached (by workers, unless a table is given)."""
    if table is not None:
        return table.get(target, frozenset())
    return frozenset(s for s, targets in TRANSITIONS.items() if target in targets)


def check(current: CellState, target: CellState) -> None:
    """Raise IllegalTransition unless a worker may move a cell from current to target."""
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"cell state {current} cannot become {target}")


def state_after(reason: Reason, budget_left: bool) -> CellState:
    """The state a running cell takes when its attempt ends with `reason`.

    Interruptions that are not the cell's fault (preempted, lost, disk_full)
    make it `interrupted`: claimed first, at once or after its back-off (see
    `backs_off`). A failure with budget left queues it for a retry after a
    back-off; without budget it is `failed`.
    """
    if reason is Reason.COMPLETED:
        return CellState.DONE
    if reason is Reason.CANCELLED:
        return CellState.CANCELLED
    if reason is Reason.PREEMPTED:
        return CellState.INTERRUPTED
    if not budget_left:
        return CellState.FAILED
    if reason in (Reason.LOST, Reason.DISK_FULL):
        return CellState.INTERRUPTED
    return CellState.QUEUED


#: Reasons whose retries are counted against a budget (preemption never is).
BUDGETED = frozenset(
    {
        Reason.LOST,
        Reason.OOM,
        Reason.NAN,
        Reason.ERROR,
        Reason.DATA_ERROR,
        Reason.TIMEOUT,
        Reason.DISK_FULL,
        Reason.LOG_FLOOD,
    }
)

#: The machine's faults, not the cell's: the cell resumes from its last committed checkpoint.
MACHINE_FAULTS = frozenset({Reason.DISK_FULL})

#: Budgets that `retries:` does not set. A full disk is freed by a person, maybe hours later:
#: ten retries, backing off up to `backoff_max_seconds` each, before the cell is `failed`.
#: A program that floods its logs floods them again: no retry, the cell is `failed` (fix it, `sweepq retry`).
OWN_BUDGETS: dict[Reason, int] = {Reason.DISK_FULL: 10, Reason.LOG_FLOOD: 0}


def budget_of(reason: Reason, budgets: Mapping[str, int]) -> int:
    """How many retries `reason` may cause: the sweep's `retries:`, else its own budget above."""
    return budgets.get(reason, OWN_BUDGETS.get(reason, 0))


def backs_off(reason: Reason) -> bool:
    """Does a retry after `reason` wait (backoff_seconds x 2^(n-1), n counting this reason's attempts)?

    A lost process is retried at once (the machine died, the cell is fine); a
    full disk is not: retrying at once would only fail again until space is freed.
    """
    return reason in BUDGETED and reason is not Reason.LOST
