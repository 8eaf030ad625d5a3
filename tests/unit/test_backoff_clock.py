"""Back-offs never outlast what was configured, whatever the wall clock does; a full disk's own budget.

The clock is the Store's injected one: setting the machine's clock back needs CAP_SYS_TIME and
would disturb everything else running here, while the Store reads time only through its clock.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sweepq.cli import render
from sweepq.queue.records import Outcome
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store
from unit.support import SWEEP_YAML, T0, WORKER, FakeClock, Launch, sweep_from

# The unit sweep: backoff_seconds 30, backoff_max_seconds 100, oom: 1.


def ended(store: Store, cell: str, reason: Reason) -> CellState | None:
    won = store.claim(cell, WORKER)
    assert won is not None
    return store.finish(cell, won.number, Outcome(reason=str(reason)))


def retry_note(store: Store, clock: FakeClock) -> str:
    table = render.status_table(store.cells(), None, now=clock.now)
    return next(line for line in render.to_text(table).splitlines() if line.startswith("1.1 "))


def test_a_clock_set_back_an_hour_does_not_stretch_a_back_off(store: Store, clock: FakeClock) -> None:
    ended(store, "1.1", Reason.OOM)
    assert "1.1" not in store.claimable()  # waiting out its 30 s
    assert "retry in 30.0s" in retry_note(store, clock)
    clock.advance(-3600)  # someone set the clock back an hour
    assert store.claimable()[0] == "1.1"  # due now, not in an hour and 30 s
    assert "retry due" in retry_note(store, clock)
    assert store.claim("1.1", WORKER) is not None


def test_a_clock_set_back_less_than_the_back_off_still_never_waits_longer(store: Store, clock: FakeClock) -> None:
    ended(store, "1.1", Reason.OOM)
    clock.advance(10)
    assert "1.1" not in store.claimable()
    clock.advance(-15)  # back 15 s, to before the back-off began: waiting on would outlast the 30 s
    assert store.claimable()[0] == "1.1"


def test_a_clock_moved_forward_only_ends_the_wait_sooner(store: Store, clock: FakeClock) -> None:
    ended(store, "1.1", Reason.OOM)
    clock.advance(7200)
    assert store.claimable()[0] == "1.1"
    assert "retry due" in retry_note(store, clock)


def test_a_later_write_of_the_cell_keeps_its_back_off(tmp_path: Path, clock: FakeClock, launch: Launch) -> None:
    """A relaunch accepting a changed cfg writes the cell (`updated_at`) mid back-off: it still waits its 30 s."""
    root = tmp_path / "root"
    store = launch(root, sweep_from(SWEEP_YAML, tmp_path))
    ended(store, "1.1", Reason.OOM)
    clock.advance(20)
    changed = SWEEP_YAML.replace("lr: [1, 2,", "lr: [1.5, 2,")
    again = launch(root, sweep_from(changed, tmp_path), accept_changed=True)
    assert again.cell("1.1").cfg["lr"] == 1.5 and again.cell("1.1").updated_at == T0 + timedelta(seconds=20)
    clock.advance(9)
    assert "1.1" not in again.claimable()
    clock.advance(1)
    assert again.claimable()[0] == "1.1"


def test_a_full_disk_interrupts_the_cell_and_backs_off_with_its_own_budget(store: Store, clock: FakeClock) -> None:
    """Ten retries (its own budget, not the sweep's `retries:`), each after a doubling back-off; never failed early."""
    delays = []
    for _ in range(10):
        assert ended(store, "1.1", Reason.DISK_FULL) is CellState.INTERRUPTED
        cell = store.cell("1.1")
        assert cell.retry_after is not None and cell.last_reason == "disk_full"
        delays.append((cell.retry_after - clock.now).total_seconds())
        assert "1.1" not in store.claimable()
        clock.now = cell.retry_after
        assert store.claimable()[0] == "1.1"  # interrupted cells first: it resumes before queued ones
    assert delays == [30, 60, 100, 100, 100, 100, 100, 100, 100, 100]
    assert ended(store, "1.1", Reason.DISK_FULL) is CellState.FAILED  # the eleventh: ten retries spent
    assert ended(store, "1.2", Reason.OOM) is CellState.QUEUED  # other reasons keep their own budgets
    assert store.cell("1.2").retry_after == clock.now + timedelta(seconds=30)


def test_a_full_disk_after_other_failures_starts_its_own_count(store: Store, clock: FakeClock) -> None:
    assert ended(store, "1.1", Reason.OOM) is CellState.QUEUED
    clock.advance(30)
    assert ended(store, "1.1", Reason.DISK_FULL) is CellState.INTERRUPTED
    assert store.cell("1.1").retry_after == T0 + timedelta(seconds=60)  # 30 s: its first, not the second failure
