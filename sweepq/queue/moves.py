"""The user's moves: retry, reset and cancel, each guarded by the state machine's user transitions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import null, update

from sweepq.queue import states
from sweepq.queue.schema import CellRow, CheckpointRow
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.queue.transactions import Transactions, rowcount

# What `reset` clears: the cell starts over as if it had never run (ran_cfg as SQL NULL: no result kept).
_NO_PROGRESS: dict[str, Any] = dict.fromkeys(
    ("step", "epoch", "metrics", "best", "best_step", "nan_step", "last_reason")
)
_NO_PROGRESS["ran_cfg"] = null()


class Moves:
    """The user's verbs: retry, reset, cancel."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx

    def retry(self, cells: list[str]) -> list[str]:
        """failed/cancelled -> queued with a fresh budget; returns the cells moved."""
        return self._user_move(cells, "retry", fresh_budget=True)

    def reset(self, cells: list[str]) -> list[str]:
        """-> queued from scratch (the caller moved checkpoints, DONE.json and output/ aside first)."""
        return self._user_move(cells, "reset", fresh_budget=True, clear_progress=True)

    def cancel(self, cells: list[str]) -> tuple[list[str], list[str]]:
        """Cancel queued/interrupted cells now; ask workers to stop running ones.

        Returns (cancelled now, cancellation requested for running cells).
        """
        moved = self._user_move(cells, "cancel")
        now = self.tx.clock()
        requested = []
        with self.tx.write() as s:
            for cid in cells:
                res = s.execute(
                    update(CellRow)
                    .where(CellRow.id == cid, CellRow.state == CellState.RUNNING)
                    .values(cancel_requested=True, updated_at=now)
                )
                if rowcount(res) == 1:
                    requested.append(cid)
                    self.tx.event(s, cid, "cancel_requested", {})
        return moved, requested

    def _user_move(
        self, cells: list[str], verb: str, *, fresh_budget: bool = False, clear_progress: bool = False
    ) -> list[str]:
        ((target, sources),) = states.USER_TRANSITIONS[verb].items()
        now = self.tx.clock()
        moved = []
        with self.tx.write() as s:
            for cid in cells:
                values: dict[str, Any] = {
                    "state": target,
                    "updated_at": now,
                    "retry_after": None,
                    "cancel_requested": False,
                }
                if target is CellState.CANCELLED:
                    values["finished_at"] = now
                    values["last_reason"] = Reason.CANCELLED
                else:
                    values["finished_at"] = None
                if fresh_budget:
                    values["budget_base"] = CellRow.attempts
                if clear_progress:
                    values.update(_NO_PROGRESS)
                res = s.execute(
                    update(CellRow)
                    .where(CellRow.id == cid, CellRow.state.in_([str(x) for x in sources]))
                    .values(**values)
                )
                if rowcount(res) == 1:
                    moved.append(cid)
                    self.tx.event(s, cid, verb, {})
                    if clear_progress:
                        s.execute(
                            update(CheckpointRow)
                            .where(CheckpointRow.cell_id == cid, CheckpointRow.state == CheckpointState.COMMITTED)
                            .values(state=CheckpointState.SUPERSEDED, note=f"moved aside by {verb}")
                        )
        return moved
