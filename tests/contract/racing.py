"""Threads started at one instant: the contract suites' races."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(runner: Callable[[int], None], n: int, timeout: float = 60) -> list[BaseException]:
    """Run `runner(0)` ... `runner(n - 1)` on n threads released together by a barrier; what they raised."""
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            runner(i)
        except BaseException as e:  # reported to the test, which asserts there was none
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), f"a racing thread did not end within {timeout} s"
    return errors
