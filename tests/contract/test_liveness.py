"""The Liveness contract (queue/liveness.py), one suite over every implementation (contract/backends.py).

Each test is written once and runs over the file lock and the lease registry;
a lease table in PostgreSQL joins by adding a backend. Two `make` calls on one
tmp_path are two processes' views of one sweep.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.backends import LeaseBackend, LivenessBackend
from contract.racing import race
from sweepq.queue.liveness import OwnershipLost


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_cell_has_one_owner_until_it_releases(owners: LivenessBackend, tmp_path: Path) -> None:
    live = owners.make(tmp_path)
    first = live.take("1.1")
    assert first is not None and first.cell == "1.1" and first.lost() is None
    assert live.take("1.1") is None  # without waiting
    assert live.owner_alive("1.1")
    first.release()
    first.release()  # idempotent
    assert not live.owner_alive("1.1")
    again = live.take("1.1")
    assert again is not None and again.lost() is None
    again.release()


def test_another_process_sees_the_owner_and_cannot_take_the_cell(owners: LivenessBackend, tmp_path: Path) -> None:
    mine, theirs = owners.make(tmp_path), owners.make(tmp_path)
    held = mine.take("1.1")
    assert held is not None
    assert theirs.owner_alive("1.1")
    assert theirs.take("1.1") is None
    other_cell = theirs.take("1.2")  # cells are owned one by one
    assert other_cell is not None
    assert mine.owner_alive("1.2") and mine.take("1.2") is None
    held.release()
    assert not theirs.owner_alive("1.1")
    taken = theirs.take("1.1")
    assert taken is not None
    taken.release()
    other_cell.release()


def test_asking_whether_an_owner_lives_changes_nothing(owners: LivenessBackend, tmp_path: Path) -> None:
    live = owners.make(tmp_path)
    before = tree(tmp_path)
    assert not live.owner_alive("1.1")  # never owned
    assert tree(tmp_path) == before
    held = live.take("1.1")
    assert held is not None
    after_take = tree(tmp_path)
    assert live.owner_alive("1.1")
    assert tree(tmp_path) == after_take
    assert held.lost() is None  # asking does not end it either
    held.release()


def test_a_child_inherits_the_ownership_it_was_handed(owners: LivenessBackend, tmp_path: Path) -> None:
    worker, child = owners.make(tmp_path), owners.make(tmp_path)
    held = worker.take("1.1")
    assert held is not None
    environ = owners.child_environ(held.handoff())
    assert child.inherit("1.1", {}) is None  # a process no worker started carries nothing
    inherited = child.inherit("1.1", environ)
    assert inherited is not None and inherited.cell == "1.1" and inherited.lost() is None
    assert child.inherit("1.1", environ) is inherited  # the attempt and its program share one
    assert child.owner_alive("1.1") and child.take("1.1") is None
    inherited.release()  # the child ended first, as a worker's child does
    assert held.lost() is None  # the worker's part is its own
    held.release()
    assert not worker.owner_alive("1.1")


def test_a_released_ownership_is_lost_and_cannot_be_handed_on(owners: LivenessBackend, tmp_path: Path) -> None:
    live = owners.make(tmp_path)
    held = live.take("1.1")
    assert held is not None
    held.release()
    assert held.lost() == "its ownership was released"
    with pytest.raises(OwnershipLost):
        held.handoff()


def test_an_owner_that_lost_its_cell_unawares_says_so_and_its_heirs_are_refused(
    owners: LivenessBackend, tmp_path: Path
) -> None:
    """A folder moved under a lock, a lease that expired while its holder was frozen: the fence asks `lost()`."""
    live, other = owners.make(tmp_path), owners.make(tmp_path)
    held = live.take("1.1")
    assert held is not None
    environ = owners.child_environ(held.handoff())
    owners.take_away(live, "1.1")
    assert held.lost() is not None
    new_owner = other.take("1.1")
    assert new_owner is not None and new_owner.lost() is None
    assert held.lost() is not None  # never two writers
    with pytest.raises(OwnershipLost, match=r"cell 1\.1"):
        owners.make(tmp_path).inherit("1.1", environ)
    new_owner.release()
    held.release()


def test_threads_racing_for_one_cell_make_one_owner(owners: LivenessBackend, tmp_path: Path) -> None:
    views = [owners.make(tmp_path) for _ in range(8)]
    won: list[object] = []

    def take(i: int) -> None:
        got = views[i].take("1.1")
        if got is not None:
            won.append(got)

    assert race(take, len(views)) == []
    assert len(won) == 1


def test_renewing_proves_life_until_the_ownership_is_lost(owners: LivenessBackend, tmp_path: Path) -> None:
    live = owners.make(tmp_path)
    held, released = live.take("1.1"), live.take("1.2")
    assert held is not None and released is not None
    assert held.renew() and held.renew()
    released.release()
    assert not released.renew()
    owners.take_away(live, "1.1")
    assert not held.renew()  # a holder told so stops writing
    assert held.lost() is not None
    held.release()


# -- leases: renewal and expiry in one clock (LEASE_BACKENDS) ---------------------------------


def test_a_renewed_lease_outlives_its_first_term_and_an_unrenewed_one_expires(
    leases: LeaseBackend, tmp_path: Path
) -> None:
    live, other = leases.make(tmp_path), leases.make(tmp_path)
    held = live.take("1.1")
    assert held is not None
    for _ in range(3):  # 60 s in all, twice the term, renewed every 20 s
        leases.advance(live, 20)
        assert held.renew()
    assert held.lost() is None and other.owner_alive("1.1") and other.take("1.1") is None
    leases.advance(live, 29)
    assert other.owner_alive("1.1")  # not a moment early
    leases.advance(live, 2)
    assert not other.owner_alive("1.1")  # the reaper's question: its holder is gone
    assert held.lost() is not None
    assert not held.renew()  # an expired lease is never revived by its old holder
    assert not other.owner_alive("1.1")


def test_an_expired_lease_is_taken_at_once_and_its_old_holders_are_refused(
    leases: LeaseBackend, tmp_path: Path
) -> None:
    live, other = leases.make(tmp_path), leases.make(tmp_path)
    held = live.take("1.1")
    assert held is not None
    environ = dict(held.handoff().env)
    leases.advance(live, 31)
    taken = other.take("1.1")
    assert taken is not None and taken.lost() is None
    assert not held.renew() and held.lost() is not None
    with pytest.raises(OwnershipLost):
        leases.make(tmp_path).inherit("1.1", environ)
    held.release()  # the old holder's release leaves the new lease alone
    assert taken.lost() is None and other.owner_alive("1.1")
    taken.release()
