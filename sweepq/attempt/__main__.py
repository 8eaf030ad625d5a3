"""`python -m sweepq.attempt <attempt.json>`: the attempt process (sweepq.attempt.main)."""

from sweepq.host import signals

if __name__ == "__main__":
    # First thing, before main's imports load torch (a second or more): a
    # SIGTERM during start-up must be a preemption, not a death.
    signals.install()

    import os

    from sweepq.attempt.main import main

    code = main()
    # os._exit: skip interpreter teardown (and any non-daemon thread a training
    # library left behind) now that every file is durable.
    os._exit(code)
