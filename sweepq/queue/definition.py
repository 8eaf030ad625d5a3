"""What the queue holds: the sweep's settings row and its cells, written from a reconcile plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sweepq.queue.models import CellRow, SweepRow
from sweepq.queue.states import CellState
from sweepq.queue.transactions import StoreBase
from sweepq.spec.sweep import Settings

if TYPE_CHECKING:
    from sweepq.queue.reconcile import ReconcilePlan as Plan

Existing = dict[str, tuple[str, dict[str, Any], bool]]  # cell id -> (cfg_hash, cfg, removed)


class StoreDefinition(StoreBase):
    def save_sweep(self, settings: Settings, spec_path: str | None, s: Session) -> None:
        now = self.clock()
        row = s.get(SweepRow, 1)
        if row is None:
            s.add(
                SweepRow(
                    id=1,
                    name=settings.name,
                    spec_path=spec_path,
                    settings=settings.to_json(),
                    created_at=now,
                    updated_at=now,
                )
            )
        else:
            row.name, row.spec_path = settings.name, spec_path
            row.settings, row.updated_at = settings.to_json(), now

    def existing_cfgs(self, session: Session | None = None) -> Existing:
        """cell id -> (cfg_hash, cfg, removed) for every stored cell."""
        if session is None:
            with self._read() as s:
                return self.existing_cfgs(s)
        rows = session.execute(select(CellRow.id, CellRow.cfg_hash, CellRow.cfg, CellRow.removed))
        return {r.id: (r.cfg_hash, r.cfg, r.removed) for r in rows}

    def apply_reconcile(self, settings: Settings, spec_path: str | None, planner: Callable[[Existing], Plan]) -> Plan:
        """Plan against the stored cells and write the plan, in one write transaction.

        The plan is made inside the transaction (not from an earlier read) so that
        two launches starting at once on a new root agree: the second one sees the
        first one's cells. A planner that raises leaves nothing written.
        """
        with self._write() as s:
            plan = planner(self.existing_cfgs(s))
            self.save_sweep(settings, spec_path, s)
            self._apply(s, plan)
        return plan

    def _apply(self, s: Session, plan: Plan) -> None:
        now = self.clock()
        for c in plan.new:
            s.add(
                CellRow(
                    id=c.id,
                    group_number=c.group,
                    index=c.index,
                    group_name=c.group_name,
                    cfg=c.cfg,
                    cfg_hash=c.cfg_hash,
                    state=CellState.QUEUED,
                    attempts=0,
                    budget_base=0,
                    cancel_requested=False,
                    removed=False,
                    created_at=now,
                    updated_at=now,
                )
            )
        for c, diff in plan.changed:
            row = s.get(CellRow, c.id)
            assert row is not None
            row.cfg, row.cfg_hash, row.updated_at = c.cfg, c.cfg_hash, now
            self._event(s, c.id, "cfg_changed", {"changes": diff, "accepted": True})
        for cid in plan.removed:
            s.execute(update(CellRow).where(CellRow.id == cid).values(removed=True, updated_at=now))
            self._event(s, cid, "removed_from_spec", {})
        for cid in plan.returned:
            s.execute(update(CellRow).where(CellRow.id == cid).values(removed=False, updated_at=now))
            self._event(s, cid, "returned_to_spec", {})
