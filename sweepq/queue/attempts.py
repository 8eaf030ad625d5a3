"""A worker's verbs: claim a cell, report on its attempt, close the attempt by the retry policy.

Also the repairs that make the database agree with the disk when a process
died before telling it (DONE.json wins). State changes are guarded in SQL
(`UPDATE ... WHERE state IN (...)`): a row count of zero is a lost race or an
illegal transition, never a silent overwrite.

Claims themselves (the verbs `claim_next` and `claim`) are claim.py's: one
statement picks and takes the next cell, its ownership taken before the commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, null, select, text, update
from sqlalchemy.orm import Session

from sweepq.errors import IllegalTransition
from sweepq.queue import states
from sweepq.queue.queries import KEEP_ALL, KEEP_CELL
from sweepq.queue.records import Outcome, json_safe
from sweepq.queue.schema import AttemptRow, CellRow, CheckpointRow
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.queue.transactions import Transactions, rowcount


class Attempts:
    """A worker's verbs on the attempts it runs, and the repairs from disk (the module's docstring)."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx

    def attempt_started(self, cell: str, number: int, **fields: Any) -> None:
        """Fill in what the training process learned at start (pid, resume step, env)."""
        allowed = {
            "pid",
            "gpus",
            "start_step",
            "start_checkpoint_sha",
            "environment",
            "code_fingerprint",
            "data_fingerprint",
        }
        values = {k: v for k, v in fields.items() if k in allowed and v is not None}
        if not values:
            return
        with self.tx.write() as s:  # an attempt already closed (reaped) takes nothing more
            s.execute(
                update(AttemptRow)
                .where(AttemptRow.cell_id == cell, AttemptRow.number == number, AttemptRow.reason.is_(None))
                .values(**values)
            )

    def attempt_usage(self, cell: str, number: int, usage: dict[str, Any]) -> None:
        """What the worker sampled of a running attempt so far (the live view shows it)."""
        with self.tx.write() as s:  # an attempt already closed keeps its final figures
            s.execute(
                update(AttemptRow)
                .where(AttemptRow.cell_id == cell, AttemptRow.number == number, AttemptRow.reason.is_(None))
                .values(usage=json_safe(usage))
            )

    def is_current(self, cell: str, number: int) -> bool:
        """The fence (queue/fence.py): is attempt `number` still the cell's running attempt?

        Asked inside a flush's `batch()`, it is decided in the write transaction
        that the attempt's writes then join: nothing can move the cell in between.
        """
        with self.tx.write() as s:
            row = s.execute(select(CellRow.state, CellRow.attempts).where(CellRow.id == cell)).first()
        return row is not None and row.attempts == number and row.state == CellState.RUNNING

    def seen(self, cell: str, number: int) -> None:
        """The attempt's last sign of life, now: its worker's flush says so once a second while it watches it.
        A reaper that finds it dead later ends it here (or at a newer sign its files show), not at the reap."""
        now = self.tx.clock()
        with self.tx.write() as s:  # an attempt already closed keeps the end it was given
            s.execute(
                update(AttemptRow)
                .where(AttemptRow.cell_id == cell, AttemptRow.number == number, AttemptRow.reason.is_(None))
                .values(seen_at=now)
            )

    def progress(self, cell: str, number: int, **fields: Any) -> None:
        """The training stream, at most about once a second per running cell."""
        now = self.tx.clock()
        allowed = {"step", "total_steps", "epoch", "total_epochs", "metrics", "best", "best_step"}
        values = {k: v for k, v in fields.items() if k in allowed}
        with self.tx.write() as s:
            s.execute(
                update(CellRow)
                .where(
                    CellRow.id == cell,
                    CellRow.state == CellState.RUNNING,
                    CellRow.attempts == number,
                )
                .values(progress_at=now, updated_at=now, **values)
            )

    def record_checkpoint(
        self,
        cell: str,
        step: int,
        *,
        path: str,
        epoch: float | None = None,
        metrics: dict[str, Any] | None = None,
        manifest_sha256: str | None = None,
        attempt: int | None = None,
        size_bytes: int | None = None,
        created_at: datetime | None = None,
        state: str = CheckpointState.COMMITTED,
        note: str | None = None,
    ) -> None:
        """Insert or update the row of a checkpoint (the manifest on disk is the source)."""
        now = self.tx.clock()
        with self.tx.write() as s:
            row = s.scalar(
                select(CheckpointRow).where(
                    CheckpointRow.cell_id == cell,
                    CheckpointRow.step == step,
                    CheckpointRow.state != CheckpointState.CORRUPT,
                )
            )
            if row is None:
                row = CheckpointRow(cell_id=cell, step=step, created_at=created_at or now, path=path)
                s.add(row)
            row.path, row.state = path, state
            for k, v in dict(
                epoch=epoch,
                metrics=metrics,
                manifest_sha256=manifest_sha256,
                attempt=attempt,
                size_bytes=size_bytes,
                note=note,
            ).items():
                if v is not None:
                    setattr(row, k, v)

    def set_checkpoint_state(self, cell: str, steps: Iterable[int], state: str, note: str | None = None) -> None:
        steps = list(steps)
        if not steps:
            return
        with self.tx.write() as s:
            values: dict[str, Any] = {"state": state}
            if note is not None:
                values["note"] = note
            s.execute(
                update(CheckpointRow)
                .where(
                    CheckpointRow.cell_id == cell,
                    CheckpointRow.step.in_(steps),
                    CheckpointRow.state != CheckpointState.CORRUPT,
                )
                .values(**values)
            )

    def finish(
        self, cell: str, number: int, outcome: Outcome, found_dead: bool = False, last_seen: datetime | None = None
    ) -> CellState | None:
        """Close an attempt and move its cell by the retry policy; None if already closed.

        One transaction: the attempt's guarded update (reason IS NULL) decides who
        closes it when a worker, an orphaned training process and a reaper race.
        `found_dead`: the attempt's processes died unseen and a later process closes it (the reaper): it
        ends at its last sign of life, the newest of its worker's last flush (`seen_at`) and `last_seen`
        (what its files showed), never before its start nor after now; the time from there to now is
        downtime (`closed_at` keeps now). Otherwise it ends now: its closer saw it end.
        """
        now = self.tx.clock()
        reason = Reason(outcome.reason)
        with self.tx.write() as s:
            policy = self.tx.settings(s).retries
            att = self.tx.attempt_row(s, cell, number)
            if att is None or att.reason is not None:
                return None
            self.fill_attempt(att, outcome, now, found_dead, last_seen)
            self._keep_span(s, cell)
            row = s.get(CellRow, cell)
            assert row is not None
            if row.state != CellState.RUNNING or row.attempts != number:
                # The cell moved on (a user command); the receipt is still recorded.
                return CellState(row.state)
            spent = self._spent(s, cell, row.budget_base, reason)
            budget_left = reason not in states.BUDGETED or spent <= states.budget_of(reason, policy.budgets)
            target = states.state_after(reason, budget_left)
            values: dict[str, Any] = {
                "state": target,
                "last_reason": reason,
                "updated_at": now,
                "cancel_requested": False,
            }
            if outcome.end_step is not None:
                values["step"] = outcome.end_step
            # With `updated_at = now`, which tells when the back-off began (see claim.retry_due).
            if target in states.CLAIMABLE and states.backs_off(reason):
                delay = min(policy.backoff_max_seconds, policy.backoff_seconds * 2 ** max(0, spent - 1))
                values["retry_after"] = now + timedelta(seconds=delay)
            if target is CellState.DONE:
                values["finished_at"] = now
                values["nan_step"] = None
                if isinstance(outcome.metrics, dict):
                    values["metrics"] = json_safe({**(row.metrics or {}), **outcome.metrics})
            if target in (CellState.FAILED, CellState.CANCELLED):  # as a cancel of a queued cell records it
                values["finished_at"] = now
            if reason is Reason.NAN:
                values["nan_step"] = outcome.nan_step
            self._guarded_cell_update(s, cell, CellState.RUNNING, target, values)
            return target

    def _marker_current(self, s: Any, cell: str, latest: int, marker: dict[str, Any]) -> bool:
        """Fencing of DONE.json: a marker written by a superseded attempt (the cell moved on to a later one,
        and the queue closed it otherwise than completed) is never trusted, whenever its write landed (a
        frozen process's late put to a bucket)."""
        number = marker.get("attempt")
        if not isinstance(number, int) or number >= latest:
            return True
        att = self.tx.attempt_row(s, cell, number)
        return att is None or att.reason in (None, Reason.COMPLETED)

    def repair_done(self, cell: str, marker: dict[str, Any]) -> bool:
        """A verified DONE.json wins over the database: make the cell done."""
        now = self.tx.clock()
        with self.tx.write() as s:
            row = s.get(CellRow, cell)
            if row is None or row.state == CellState.DONE:
                return False
            if not self._marker_current(s, cell, row.attempts, marker):
                return False
            if row.state == CellState.RUNNING:
                att = self.tx.attempt_row(s, cell, row.attempts)
                if att is not None and att.reason is None:
                    self.fill_attempt(
                        att,
                        Outcome(
                            reason=Reason.COMPLETED,
                            end_step=marker.get("step"),
                            note="closed from DONE.json (its process ended before the database was told)",
                        ),
                        now,
                    )
                    self._keep_span(s, cell)
                sources: frozenset[CellState] = frozenset({CellState.RUNNING})
            else:
                sources = states.sources_of(CellState.DONE, states.REPAIR_TRANSITIONS)
            values = {
                "state": CellState.DONE,
                "last_reason": Reason.COMPLETED,
                "finished_at": now,
                "updated_at": now,
                "retry_after": None,
                "cancel_requested": False,
                "metrics": json_safe({**(row.metrics or {}), **(marker.get("metrics") or {})}),
            }
            if marker.get("step") is not None:
                values["step"] = marker["step"]
            res = s.execute(
                update(CellRow).where(CellRow.id == cell, CellRow.state.in_([str(x) for x in sources])).values(**values)
            )
            if rowcount(res) == 1:
                self.tx.event(s, cell, "repaired_from_marker", {"from": row.state, "attempt": marker.get("attempt")})
            return rowcount(res) == 1

    def requeue_missing_marker(self, cell: str, why: str) -> bool:
        now = self.tx.clock()
        with self.tx.write() as s:
            res = s.execute(
                update(CellRow)
                .where(CellRow.id == cell, CellRow.state == CellState.DONE)
                # ran_cfg: its result gone with the marker, the cell runs its own cfg (reconcile.py)
                .values(state=CellState.QUEUED, finished_at=None, updated_at=now, ran_cfg=null())
            )
            if rowcount(res) == 1:
                self.tx.event(s, cell, "marker_invalid", {"why": why})
            return rowcount(res) == 1

    def keep_spans(self) -> int:
        """Keep the span of every ended attempt that has none kept (an older root's, one a write made
        stale): what a launch does once, so that `status` reads them instead of working them out."""
        with self.tx.write() as s:
            return sum(rowcount(_span_statement(s, sql, {})) for sql in KEEP_ALL)

    # -- helpers --------------------------------------------------------------

    @staticmethod
    def _spent(s: Session, cell: str, base: int, reason: Reason) -> int:
        """Attempts that ended with `reason` since the last fresh budget (this one included)."""
        q = (
            select(func.count())
            .select_from(AttemptRow)
            .where(AttemptRow.cell_id == cell, AttemptRow.number > base, AttemptRow.reason == str(reason))
        )
        return int(s.scalar(q) or 0)

    @staticmethod
    def _keep_span(s: Session, cell: str) -> None:
        """Keep the span of the cell's attempt that just ended, for the forecast (queries.py)."""
        s.flush()  # the attempt's end, which the span is worked out from
        for sql in KEEP_CELL:
            _span_statement(s, sql, {"cell": cell})

    @staticmethod
    def fill_attempt(
        att: AttemptRow, o: Outcome, now: datetime, found_dead: bool = False, last_seen: datetime | None = None
    ) -> None:
        att.reason = str(Reason(o.reason))
        att.closed_at = now
        att.ended_at = now
        if found_dead:
            att.ended_at = last_sign_of_life(att.started_at, att.seen_at, last_seen, now)
        att.seen_at = att.ended_at
        for name in (
            "end_step",
            "exit_code",
            "exit_signal",
            "error_tail",
            "peak_memory_bytes",
            "peak_gpu_memory_bytes",
            "note",
            "pid",
            "gpus",
            "environment",
            "code_fingerprint",
            "data_fingerprint",
            "start_step",
            "start_checkpoint_sha",
        ):
            v = getattr(o, name)
            if v is not None:
                setattr(att, name, v)
        wall = o.wall_seconds
        if wall is None:  # its life, to its end: a reaped attempt's downtime is not its wall time
            wall = (att.ended_at - att.started_at).total_seconds()
        if isinstance(o.usage, dict):  # a receipt from another version or hand may hold anything
            att.usage = json_safe(o.usage)
        att.wall_seconds = wall
        att.gpu_seconds = o.gpu_seconds if o.gpu_seconds is not None else wall * len(att.gpus or [])

    def _guarded_cell_update(
        self, s: Session, cell: str, source: CellState, target: CellState, values: dict[str, Any]
    ) -> None:
        states.check(source, target)
        res = s.execute(update(CellRow).where(CellRow.id == cell, CellRow.state == source).values(**values))
        if rowcount(res) != 1:
            raise IllegalTransition(f"cell {cell} was not {source} when it should become {target}")


def last_sign_of_life(
    started_at: datetime, seen_at: datetime | None, found: datetime | None, now: datetime
) -> datetime:
    """When an attempt found dead ended: the newest of its worker's last flush (`seen_at`) and what its
    files showed (`found`), never before it started (a clock that went back) nor after `now` (the reap);
    with neither, it ended as it started (nothing it did was ever seen)."""
    signs = [t for t in (seen_at, found) if t is not None]
    return min(max([started_at, *signs]), now)


def _span_statement(s: Session, sql: str, params: dict[str, Any]) -> Any:
    """Run one of queries.py's span statements in `s`'s write transaction. On a server: in PostgreSQL's
    spelling (server_text.py; SQLAlchemy's text() doubles a literal % itself), its unqualified tables
    those of the sweep's schema for the rest of this transaction (SET LOCAL: nothing kept in the session,
    and the ORM's statements name the schema themselves)."""
    schema = (s.get_bind().get_execution_options().get("schema_translate_map") or {}).get(None)
    if s.get_bind().dialect.name != "sqlite":
        from sweepq.queue import pg_schema
        from sweepq.queue.server_text import spelled

        if schema is not None:
            s.execute(text(f"SET LOCAL search_path TO {pg_schema.quoted(schema)}"))
        sql = spelled(sql).replace("%%", "%")
    return s.execute(text(sql), params)
