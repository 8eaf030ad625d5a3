"""`python -m sweepq.attempt <attempt.json>`: the attempt process's entry (sweepq.attempt.main)."""

import os

from sweepq.attempt.main import main

if __name__ == "__main__":
    code = main()
    # os._exit: skip interpreter teardown (and any non-daemon thread a training
    # library left behind) now that every file is durable.
    os._exit(code)
