"""`python -m sweepq.attempt.rank`: one rank of a `train:` cell of several processes (`processes: N`).

The attempt process starts N of these with torchrun's environment (program/ranks.py) and supervises
them as it supervises a torchrun program: one attempt, one fate. Each rank imports the cell's train
function and calls `train(cfg, run)` with its own Run (`Run.from_env()`): rank 0 reports, logs and
commits; the others follow its decisions (run/collective.py). How the attempt ended is what rank 0's
Run writes in the outcome file, judged with every rank's exit by the supervisor.
"""

from sweepq.host import signals

if __name__ == "__main__":
    # Before torch loads (a second or more): a SIGTERM during start-up is a preemption, not a death.
    signals.install()

    import os
    import sys

    from sweepq.attempt.training import import_entry, result_metrics
    from sweepq.run.run import Run
    from sweepq.spec.sweep import Settings

    run = Run.from_env()
    assert run is not None  # from_env() raises outside sweepq
    settings = Settings.from_json(run._spec.settings)
    train = import_entry(settings.train or "", settings.spec_dir)
    result = train(dict(run.cfg), run)
    run.finish(result_metrics(result))  # a collective: the final checkpoint, on every rank
    sys.stdout.flush()
    sys.stderr.flush()
    # As the attempt process does: no interpreter teardown for threads a library left behind. The
    # reporter's exit hook has run its course in finish() (the outcome file is written).
    os._exit(0)
