"""The cell state machine (sweepq/queue/states.py) against DESIGN.md, without a database."""

from __future__ import annotations

import itertools

import pytest

from sweepq.errors import IllegalTransition
from sweepq.queue import states
from sweepq.queue.states import CellState, Reason

Q, R, I, D, F, C = (  # noqa: E741 (I is "interrupted", as in the design's diagram)
    CellState.QUEUED,
    CellState.RUNNING,
    CellState.INTERRUPTED,
    CellState.DONE,
    CellState.FAILED,
    CellState.CANCELLED,
)

# DESIGN.md: queued → running → done | failed | interrupted | queued (retry); interrupted → running;
# any non-terminal → cancelled.
LEGAL = {
    (Q, R),
    (R, D),
    (R, F),
    (R, I),
    (R, Q),
    (I, R),
    (Q, C),
    (R, C),
    (I, C),
}
ALL_PAIRS = list(itertools.product(CellState, CellState))


def test_state_and_reason_names_are_the_contract() -> None:
    assert [s.value for s in CellState] == ["queued", "running", "interrupted", "done", "failed", "cancelled"]
    assert {r.value for r in Reason} == {
        "completed",
        "preempted",
        "lost",
        "oom",
        "nan",
        "error",
        "data_error",
        "timeout",
        "cancelled",
        "disk_full",
        "log_flood",
    }


@pytest.mark.parametrize(("current", "target"), sorted(LEGAL))
def test_legal_transition_passes(current: CellState, target: CellState) -> None:
    states.check(current, target)  # does not raise
    assert target in states.TRANSITIONS[current]


@pytest.mark.parametrize(("current", "target"), [p for p in ALL_PAIRS if p not in LEGAL])
def test_illegal_transition_raises(current: CellState, target: CellState) -> None:
    with pytest.raises(IllegalTransition, match=f"{current} cannot become {target}"):
        states.check(current, target)


def test_terminal_states_have_no_worker_transitions() -> None:
    assert {D, F, C} == states.TERMINAL
    for s in states.TERMINAL:
        assert states.TRANSITIONS[s] == frozenset()
    assert set(states.TRANSITIONS) == set(CellState)


def test_claim_order_is_interrupted_then_queued() -> None:
    assert states.CLAIMABLE == (I, Q)
    assert states.sources_of(R) == {Q, I}  # the claim's guarded UPDATE


def test_sources_of_reads_the_worker_table_or_a_given_one() -> None:
    assert states.sources_of(C) == {Q, R, I}
    assert states.sources_of(Q) == {R}  # only a retry waiting out its back-off
    assert states.sources_of(D, states.REPAIR_TRANSITIONS) == {Q, I, F, C}
    assert states.sources_of(R, states.REPAIR_TRANSITIONS) == frozenset()


def test_user_moves() -> None:
    retry, reset, cancel = (states.USER_TRANSITIONS[v] for v in ("retry", "reset", "cancel"))
    assert retry == {Q: {F, C}}
    assert cancel == {C: {Q, I}}  # a running cell is asked to stop, not moved
    ((target, sources),) = reset.items()
    assert target is Q
    assert R not in sources  # a running cell must be cancelled first
    assert sources == {Q, I, D, F, C}


@pytest.mark.parametrize("budget_left", [True, False])
def test_reasons_that_ignore_the_budget(budget_left: bool) -> None:
    assert states.state_after(Reason.COMPLETED, budget_left) is D
    assert states.state_after(Reason.CANCELLED, budget_left) is C
    # Preemption is not a failure: the cell resumes first, whatever its budgets say.
    assert states.state_after(Reason.PREEMPTED, budget_left) is I


def test_lost_resumes_first_until_its_budget_is_spent() -> None:
    assert states.state_after(Reason.LOST, budget_left=True) is I  # no back-off: not the cell's fault
    assert states.state_after(Reason.LOST, budget_left=False) is F


@pytest.mark.parametrize("reason", [Reason.OOM, Reason.NAN, Reason.ERROR, Reason.DATA_ERROR, Reason.TIMEOUT])
def test_error_like_reasons_requeue_or_fail(reason: Reason) -> None:
    assert states.state_after(reason, budget_left=True) is Q  # a retry after a back-off
    assert states.state_after(reason, budget_left=False) is F


def test_every_state_after_is_a_legal_move_from_running() -> None:
    for reason, left in itertools.product(Reason, (True, False)):
        states.check(R, states.state_after(reason, left))


def test_budgeted_reasons() -> None:
    budgeted = {Reason.LOST, Reason.OOM, Reason.NAN, Reason.ERROR, Reason.DATA_ERROR, Reason.TIMEOUT, Reason.DISK_FULL}
    assert budgeted | {Reason.LOG_FLOOD} == states.BUDGETED
    assert Reason.PREEMPTED not in states.BUDGETED


def test_a_log_flood_fails_the_cell_at_once() -> None:
    """A program that floods its logs floods them again: its budget is 0 unless `retries:` names it."""
    assert states.budget_of(Reason.LOG_FLOOD, {"error": 3}) == 0
    assert states.state_after(Reason.LOG_FLOOD, budget_left=False) is F


def test_a_full_disk_interrupts_with_its_own_budget_and_back_off() -> None:
    """The machine's fault: the cell resumes (never failed by the first one), after a back-off."""
    assert states.state_after(Reason.DISK_FULL, budget_left=True) is I
    assert states.state_after(Reason.DISK_FULL, budget_left=False) is F
    assert states.backs_off(Reason.DISK_FULL) and not states.backs_off(Reason.LOST)
    assert states.budget_of(Reason.DISK_FULL, {"lost": 3}) == 10  # its own, whatever `retries:` says
    assert states.budget_of(Reason.DISK_FULL, {"disk_full": 2}) == 2
    assert states.budget_of(Reason.ERROR, {}) == 0
    assert {Reason.DISK_FULL} == states.MACHINE_FAULTS
