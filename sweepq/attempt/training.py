"""One attempt of a `train:` cell: import the user's function and run train(cfg, run) in this process.

Loaded by the attempt process of train cells only: it brings torch and the
user's code, which a program cell's supervisor never needs.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

from sweepq.attempt.judge import judged
from sweepq.checkpoint.fenced import FenceCheck
from sweepq.host.diskfull import disk_error
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.run.errors import raised
from sweepq.run.metrics import plain
from sweepq.run.run import Run
from sweepq.spec.sweep import Settings
from sweepq.wire.attempt_spec import AttemptSpec
from sweepq.wire.channel import Channel


def import_entry(train: str, spec_dir: str) -> Any:
    """Import `module:function` with the sweep file's folder first on sys.path."""
    module_name, _, func_name = train.partition(":")
    if spec_dir not in sys.path:
        sys.path.insert(0, spec_dir)
    module = importlib.import_module(module_name)
    func = getattr(module, func_name, None)
    if not callable(func):
        raise AttributeError(f"{module_name} has no function {func_name!r} (from train: {train})")
    return func


def run_train(
    spec: AttemptSpec, settings: Settings, channel: Channel, fence: FenceCheck | None = None
) -> tuple[Outcome, Run | None]:
    run: Run | None = None
    try:
        func = import_entry(settings.train or "", settings.spec_dir)
        run = Run(spec, channel, fence)
        result = func(dict(spec.cfg), run)
    except BaseException as e:
        if run is not None:
            _close_quietly(run)
        return judged(run, raised=raised(e)), run
    outcome = judged(run, finished=True, metrics=result_metrics(result))
    if outcome.reason != Reason.COMPLETED:
        failed = _close_quietly(run)  # a full disk refused the emergency checkpoint: say so
        if failed is not None and disk_error(failed) is not None:
            return judged(run, raised=raised(failed)), run
        return outcome, run
    try:
        run.close(completed=True)  # the final checkpoint: its failure is the attempt's
    except Exception as e:
        traceback.print_exc()
        return judged(run, raised=raised(e)), run
    return outcome, run


def _close_quietly(run: Run) -> Exception | None:
    try:
        run.close(completed=False)
    except Exception as e:
        traceback.print_exc()
        return e
    return None


def result_metrics(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    if isinstance(result, dict):
        return plain(result)
    return {"result": str(result)}
