"""`SweepqCallback`: a Hugging Face `Trainer` script as a sweepq program cell, with one line.

    sq = SweepqCallback()
    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[sq])
    trainer.train(resume_from_checkpoint=sq.resume_from)  # None on a fresh start or outside sweepq

The cell gets its progress and ETA (`max_steps`), every number the Trainer
logs, checkpoints at the sweep's cadence (the Trainer's own `checkpoint-N/`
folders, kept by sweepq as verified copies; the final step is always kept),
the verified copy to resume from (never "the newest folder"), preemption
recorded as `preempted`, and the final metrics (the last of each logged
number, evaluations after `train()` included) in DONE.json.

A stop signal (SIGTERM, SIGINT, SIGUSR1, SIGHUP) makes the Trainer save the
current step and return from `train()` early: the script's code after it
still runs, and the program exiting 0 is recorded as preempted, never done.
Outside sweepq every hook does nothing and `resume_from` is None. Under
torchrun only rank 0 reports (a Run has one writer); stopping every rank
together on a preemption is not handled.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sweepq import ownfiles
from sweepq.checkpoint.files import NotFiles
from sweepq.run.run import Run

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")  # the Trainer's PREFIX_CHECKPOINT_DIR folders


class SweepqCallback(TrainerCallback):
    """Reports a Trainer's progress, checkpoints and end to sweepq; a no-op outside sweepq."""

    def __init__(self) -> None:
        self.run: Run | None = Run.from_env(required=False) if os.environ.get("RANK", "0") == "0" else None
        self._asked = False  # whether the script asked for resume_from
        self._latest: dict[str, float] = {}  # the last value of each number the Trainer logged
        self._finished = False
        self._save_at_epoch_end = False  # a checkpoint due at an epoch's last step (on_epoch_end)
        self._start_step = 0  # the step this attempt's train() started from

    @property
    def resume_from(self) -> str | None:
        """The verified copy of the Trainer checkpoint this attempt resumes from; None: start fresh."""
        if self.run is None:
            return None
        self._asked = True
        path = self.run.resume_path()
        return None if path is None else str(path)

    # -- the Trainer's events ---------------------------------------------------------

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        if self.run is None:
            return
        self.run.set_total(state.max_steps, epochs=state.num_train_epochs)
        self._start_step = state.global_step
        self._check_settings(args, state)
        if args.should_save:
            _claim(_output_dir(args), self.run)  # before anything there is touched
            _remove_abandoned(_output_dir(args), state.global_step)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        if self.run is None:
            return
        step = state.global_step
        if self.run.should_stop:  # preempted: keep this step, then leave train()
            control.should_training_stop = True
        # The final step is always kept; a stop keeps the step it arrived at.
        due = self.run.should_stop or step >= state.max_steps or self.run.checkpoint_due(step)
        if due and _ends_epoch(state) and not self._save_at_epoch_end:
            self._save_at_epoch_end = True  # on_epoch_end comes right after this step
        elif due or self._save_at_epoch_end:  # (an epoch end that did not come: now)
            self._save_at_epoch_end = False
            control.should_save = True

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        # A checkpoint due at an epoch's last step is saved after the epoch's evaluation: the Trainer's
        # RNG state is then the one the next epoch starts from (an evaluation draws from the global RNG),
        # and a resume from it continues exactly as the uninterrupted run.
        if self._save_at_epoch_end:
            self._save_at_epoch_end = False
            control.should_save = True

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        if self.run is None or not logs:
            return
        numbers = {k: float(v) for k, v in logs.items() if _is_number(v) and k != "epoch"}
        if "train_loss" in numbers and self._start_step > 0:
            numbers = _whole_run_summary(numbers, state, self._start_step)
        self._latest.update(numbers)
        epoch = {} if state.epoch is None else {"epoch": state.epoch}
        self.run.log(state.global_step, **numbers, **epoch)
        if self._finished:  # an evaluation after train(): its numbers join the final metrics
            self.run.finish(self._latest)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        if self.run is None or not args.should_save:
            return
        # _save_checkpoint wrote this folder and rotated older ones before calling on_save.
        folder = _output_dir(args) / f"checkpoint-{state.global_step}"
        try:
            self.run.commit_files(state.global_step, folder, dict(self._latest))
        except NotFiles as e:
            raise NotFiles(
                f"sweepq cannot keep the Trainer's checkpoint {folder}: {e}. It keeps flat checkpoint folders "
                "(DeepSpeed's and sharded FSDP checkpoints, which hold folders, are not supported)"
            ) from e
        # sweepq has its verified copy: the Trainer's own folders stay within its save_total_limit, or
        # sweepq's keep_last where none is set (the Trainer would keep every one of them).
        _prune_saved(_output_dir(args), args.save_total_limit or self.run.keep_last, state.best_model_checkpoint)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        if self.run is None:
            return
        step = state.global_step
        if self.run.should_stop and step < state.max_steps:
            _say(f"a stop signal arrived: training stopped at step {step} of {state.max_steps} (step {step} is kept)")
            return
        # The end of training as the Trainer decided it: its last step, or a callback's early stop.
        newest = self.run.newest_committed()
        if newest is None or newest[0] < step:
            kept = "none" if newest is None else f"step {newest[0]}"
            _say(f"training ended at step {step}, which the Trainer did not save; the newest checkpoint is {kept}")
        self._finished = True
        self.run.finish(self._latest)

    # -- settings that defeat what sweepq asks of the Trainer -------------------------------

    def _check_settings(self, args: TrainingArguments, state: TrainerState) -> None:
        run = self.run
        assert run is not None
        if not self._asked:
            _say(
                "trainer.train() started without asking sq.resume_from, so it does not resume from sweepq's "
                "verified checkpoint. Write trainer.train(resume_from_checkpoint=sq.resume_from)"
            )
        elif state.global_step != run.start_step:
            _say(
                f"training starts at step {state.global_step}, not at sweepq's verified checkpoint "
                f"(step {run.start_step}): pass resume_from_checkpoint=sq.resume_from to trainer.train()"
            )
        if args.save_strategy == "best":
            _say(
                "save_strategy='best' lets the Trainer cancel the checkpoints sweepq asks for at evaluation "
                "steps (a preemption's included); use save_strategy='steps' or 'no'"
            )
        if args.save_only_model:
            _say(
                "save_only_model=True: the checkpoints hold no optimizer, scheduler or RNG state, so a resumed "
                "attempt does not continue the same training"
            )


_PER_CALL = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


def _whole_run_summary(numbers: dict[str, float], state: TrainerState, start: int) -> dict[str, float]:
    """The summary `train()` logs at its end, made to cover the whole run of a resumed cell.

    The Trainer's `train_loss` is the mean loss of the steps of this call
    only (start..global_step), and its `train_runtime`/`*_per_second` time
    this call only. `train_loss` is recomputed as the uninterrupted run
    reports it, the step-weighted mean over every step: the losses logged
    up to `start` come from `state.log_history`, restored from the
    checkpoint this attempt resumed (each logged `loss` is the mean over the
    steps since the previous log). When those logs do not cover every step
    up to `start` (a checkpoint saved between two logging steps), the mean
    cannot be recomputed, and the per-call value is kept under
    `attempt_train_loss` rather than passed off as the run's. The timings
    have no whole-run counterpart here: they are kept as `attempt_*`.
    """
    out = dict(numbers)
    for key in _PER_CALL:
        if key in out:
            out[f"attempt_{key}"] = out.pop(key)
    end = state.global_step
    earlier = sorted(
        (int(e["step"]), float(e["loss"])) for e in state.log_history if "loss" in e and int(e.get("step", 0)) <= start
    )
    total, covered = 0.0, 0
    for step, loss in earlier:
        total += loss * (step - covered)
        covered = step
    this_call = out.pop("train_loss")
    if covered == start and end > 0:
        out["train_loss"] = (total + this_call * (end - start)) / end
    else:
        out["attempt_train_loss"] = this_call
        _say(
            f"train_loss covers steps {start}..{end} only (the logs restored cover steps up to {covered}, "
            f"not {start}): DONE.json keeps it as attempt_train_loss"
        )
    return out


_OWNER = ".sweepq-cell"  # in an output_dir: which cell of which sweep writes there


def _claim(output_dir: Path, run: Run) -> None:
    """Make `output_dir` this cell's, or refuse to train in one that another cell writes to.

    The callback removes `checkpoint-N/` folders an earlier attempt of its cell
    left there; with one `output_dir` for every cell those would be other
    cells' folders, and their saves would overwrite each other's files.
    """
    me = f"{run.root.resolve()}\n{run.cell}\n"
    output_dir.mkdir(parents=True, exist_ok=True)
    marker = output_dir / _OWNER
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # the first cell to come claims it
    except FileExistsError:
        owner = marker.read_text()
        if owner != me:
            root, _, cell = owner.partition("\n")
            raise ValueError(
                f"output_dir {output_dir.resolve()} is already the output folder of cell {cell.strip()} of the sweep "
                f"at {root}, so this cell ({run.cell}) would overwrite its checkpoints and files. Give each cell its "
                "own output_dir: a relative one (e.g. output_dir='out') under workdir: output (the default: each "
                "cell runs in its own folder), or the cell's own output folder: --output_dir=${output_dir}/out"
            ) from None
        return
    with os.fdopen(fd, "w") as f:
        f.write(me)


def _remove_abandoned(output_dir: Path, step: int) -> None:
    """Remove the Trainer's `checkpoint-N/` folders newer than the step training starts from.

    They were saved by an attempt that was killed before sweepq kept them, or
    belong to a timeline sweepq abandoned (a damaged checkpoint, a rollback).
    Left there, they would be taken for the newest checkpoints: the Trainer's
    rotation (`save_total_limit`) would delete the folder it just saved
    before sweepq could keep it.
    """
    if not output_dir.is_dir():
        return
    for entry in sorted(output_dir.iterdir()):
        m = _CHECKPOINT.fullmatch(entry.name)
        if m and int(m.group(1)) > step and entry.is_dir():
            _say(f"removing {entry}: saved after step {step}, where this attempt starts, by an earlier attempt")
            ownfiles.remove(entry)  # a link there goes itself: what it points at is not this attempt's


def _prune_saved(output_dir: Path, limit: int, best: str | None) -> None:
    """Remove the Trainer's `checkpoint-N/` folders but the newest `limit` and the best model's.

    Only in an output_dir this cell has claimed (`_claim`): a folder another cell writes is never touched.
    """
    saved = sorted(
        (int(m.group(1)), entry)
        for entry in output_dir.iterdir()
        if (m := _CHECKPOINT.fullmatch(entry.name)) and entry.is_dir()
    )
    keep = {Path(best).name} if best else set()
    for _, entry in saved[: max(len(saved) - max(limit, 1), 0)]:
        if entry.name not in keep:
            ownfiles.remove(entry)  # a link there goes itself: what it points at is not this cell's


def _output_dir(args: TrainingArguments) -> Path:
    return Path(args.output_dir or "trainer_output")  # None only before TrainingArguments set its default


def _ends_epoch(state: TrainerState) -> bool:
    """Whether this step is an epoch's last (the Trainer sets epoch = epoch + (step + 1) / steps_in_epoch)."""
    return state.epoch is not None and float(state.epoch).is_integer()


def _is_number(v: Any) -> bool:
    # NaN included: run.log ends the cell `nan` on a non-finite loss, as for any program.
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _say(message: str) -> None:
    print(f"sweepq: {message}", file=sys.stderr, flush=True)


__all__ = ["SweepqCallback"]
