"""The training process of one attempt: `python -m sweepq.attempt <attempt.json>`.

Started by a worker with the cell's locked descriptor (so the lock lives as
long as this process) and a channel to report on. It runs `train(cfg, run)`
in-process, or the user's program as a child, tells how the attempt ended
(by the rules of sweepq.outcome), writes DONE.json on completion and always a receipt file, then exits.
If its worker died meanwhile (it then got SIGTERM from the kernel), it closes
its own attempt in the database before exiting, so the receipt is written
before the last process of the sweep is gone.
"""

from __future__ import annotations

from sweepq.run import signals
