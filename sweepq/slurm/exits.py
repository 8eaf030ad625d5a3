"""The exit-code contract of a worker run by a scheduler (`sweepq worker --scheduler`, a Slurm job).

A scheduler acts on three answers: done (the job ends for good), requeue me (a warning or a
preemption stopped it while cells remain: start it again, this costs no work), failed (something a
new start would meet again). docs/scale.md shows Slurm's `RequeueExit` and a Kubernetes Indexed
Job's `podFailurePolicy` using them; a test checks that manifest against these constants.
"""

from __future__ import annotations

EXIT_DONE = 0  # every cell is settled, or a user stopped the sweep: do not start the job again
EXIT_REQUEUE = 75  # EX_TEMPFAIL: stopped by a warning or a preemption with cells left: start it again
EXIT_FAILED = 1  # the worker could not go on (a full disk, a root that is not a sweep): do not retry blindly
