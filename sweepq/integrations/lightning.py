"""sweepq for Lightning: one callback makes a Lightning script a first-class sweepq program cell.

    from sweepq.integrations.lightning import SweepqCallback

    sq = SweepqCallback()
    trainer = L.Trainer(..., callbacks=[sq])
    trainer.fit(model, datamodule=dm, ckpt_path=sq.ckpt_path)  # None outside sweepq or on a fresh start

`ckpt_path` is passed by hand: Lightning decides which checkpoint it loads
before any callback hook runs. Under sweepq the callback gives the cell
- progress and ETA (`estimated_stepping_batches`) and every logged metric,
  tensors as floats, after each training batch and each validation;
- checkpoints at the sweep's cadence (`checkpoint:` in the sweep file):
  Lightning's own full checkpoint (`trainer.save_checkpoint`), kept by sweepq
  as a verified checkpoint; `sq.ckpt_path` is the newest that verifies;
- preemption: after any of sweepq's stop signals, the step just trained is
  kept and training ends as Lightning ends it on SIGTERM (`SIGTERMException`,
  exit status 0, which sweepq records as `preempted`); a SIGTERM that
  Lightning acts on later (after validation, at an epoch's end) keeps that
  step from `on_exception`, but one in the middle of a validation keeps
  nothing (Lightning would resume it without its metrics);
- completion: when a fit reaches its end (epochs, steps, early stopping), the
  last step is kept and `run.finish(callback_metrics)` puts them in DONE.json;
  a `trainer.test()` after it adds its metrics there (`run.add_final_metrics`);
- an inexact resume: resumed mid-epoch with a training loader that cannot
  restore its position (Lightning's own test, which only warns on stderr), the
  epoch goes on with other batches; `run.resume_inexact` flags the cell in
  its receipt, `status` and `best`.

Lightning's loggers start a new `version_N` an attempt; the callback does not
pin the version: CSVLogger deletes the metrics.csv of a version folder it
reopens (`_check_log_dir_exists`), which would lose the earlier attempts' logs.
Outside sweepq every hook does nothing and `ckpt_path` is None.

Lightning's own ModelCheckpoint and loggers keep working: they write in the
cell's output folder, the program's working directory.

Several devices (DDP): global rank 0 alone holds the Run; it decides when to
checkpoint or stop and the other ranks follow (`strategy.broadcast`, once a
batch); every rank calls `save_checkpoint` and rank 0 commits; the other ranks,
which Lightning's DDP launcher starts with rank 0's environment, resume from
the path rank 0 resolved; ranks that sweepq started (`processes: N`, torchrun's
environment) from the checkpoint their attempt verified before starting them
(tests/process/test_ranks_train.py: two CPU ranks on gloo through kill -9).
Untested on several GPUs. Strategies that save a checkpoint as a folder of shards (FSDP's
sharded state, DeepSpeed) are refused by name.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.types import _Stateful
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from sweepq.errors import SweepqError
from sweepq.program.launch import ENV
from sweepq.run.run import Run
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE

CKPT_NAME = "lightning.ckpt"  # the file of a kept checkpoint
SCRATCH_NAME = ".sweepq-lightning.ckpt"  # in the output folder, between save_checkpoint and the commit
ENV_CKPT = "SWEEPQ_LIGHTNING_CKPT"  # the path rank 0 resolved, for the ranks Lightning's launcher starts

T = TypeVar("T")


class SweepqCallback(Callback):
    """Progress, metrics, verified checkpoints, preemption and completion of a Lightning fit, for sweepq."""

    def __init__(self) -> None:
        super().__init__()
        self.active = bool(os.environ.get(ENV_ATTEMPT_FILE))  # started by sweepq (on every rank)
        # One process reports to sweepq (Run.from_env()): global rank 0. Lightning sets the rank
        # from the environment on import (a rank its DDP launcher starts has LOCAL_RANK, torchrun RANK).
        rank = getattr(rank_zero_only, "rank", 0)
        self.run: Run | None = Run.from_env(required=False) if rank == 0 else None
        self._resume: tuple[str | None] | None = None
        self._started = False  # the fit loop started (on_train_start): its state is a training state
        self._kept = -1  # the newest step sweepq keeps: committed, or resumed from
        self._seen = -1  # the global step at the last batch end: it moves at an optimizer step
        self._boundary = True  # the last batch ended an optimizer step (not inside gradient accumulation)
        self._epoch = 0.0  # the fractional epoch at the last batch end

    @property
    def ckpt_path(self) -> str | None:
        """The verified Lightning checkpoint this cell resumes from: pass it to `trainer.fit(ckpt_path=...)`.

        None outside sweepq or when the cell starts fresh. Every byte was just
        checked against the manifest sweepq wrote when it kept it; a damaged one
        is moved aside and the previous one used.
        """
        if self._resume is None:
            self._resume = (self._resolve(),)
        return self._resume[0]

    def _resolve(self) -> str | None:
        if self.run is None:  # outside sweepq, or a rank other than 0: what rank 0 resolved
            if not self.active:
                return None
            if ENV_CKPT in os.environ:  # a rank Lightning's own launcher started from rank 0's environment
                return os.environ[ENV_CKPT] or None
            # A rank that sweepq started beside rank 0 (`processes: N`): the checkpoint its attempt
            # verified before starting the ranks, the one rank 0's Run resolves.
            verified = os.environ.get(ENV["resume"])
            return str(Path(verified) / CKPT_NAME) if verified else None
        folder = self.run.resume_path()
        path = None if folder is None else folder / CKPT_NAME
        if folder is not None and not (path and path.is_file()):
            raise SweepqError(
                f"SweepqCallback: the checkpoint this cell resumes from, {folder}, holds no {CKPT_NAME}: it was "
                f"not written by SweepqCallback (its files: {', '.join(sorted(p.name for p in folder.iterdir()))}). "
                f"Reset the cell to start it afresh: sweepq reset {self.run.cell}"
            )
        os.environ[ENV_CKPT] = str(path or "")
        return None if path is None else str(path)

    # -- the hooks --------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Before Lightning loads `ckpt_path`: let it load sweepq's verified file in full (_TrustedResume)."""
        ours = self.ckpt_path if self.active and stage == "fit" else None
        if ours is not None:
            trainer.strategy.checkpoint_io = _TrustedResume(trainer.strategy.checkpoint_io, ours)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        if isinstance(io, _TrustedResume):
            trainer.strategy.checkpoint_io = io.inner

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.active:
            return
        self._check_resumed_from_ours(trainer)
        self.teardown(trainer, pl_module, "fit")  # loaded: the user's CheckpointIO is theirs again
        self._kept = self._seen = trainer.global_step
        self._started = True
        if self.run is not None and self.ckpt_path is not None and (why := _data_order_restarts(trainer)):
            self.run.resume_inexact(why)
        if self.run is not None:
            self._scratch().unlink(missing_ok=True)  # left by an attempt killed while it saved
            total = trainer.estimated_stepping_batches
            if math.isfinite(total):
                epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
                self.run.set_total(int(total), epochs=epochs)
        if self._agreed(trainer, self._stop_requested()):
            raise SIGTERMException  # stopped while loading: the state is the one resumed from

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.active:
            return
        step = trainer.global_step
        # Between optimizer steps (gradient accumulation) the state is not one to resume from.
        self._boundary, self._seen = step != self._seen, step
        metrics = _scalars(trainer.callback_metrics)
        self._epoch = _epoch(trainer, batch_idx)
        if self.run is not None:
            self.run.log(step, **{**metrics, "epoch": self._epoch})
        due = self.run is not None and self.run.checkpoint_due(step)
        stop, due = self._agreed(trainer, (self._stop_requested(), due))
        if self._boundary and (due or (stop and step > self._kept)):
            self._keep(trainer, step, metrics)
        if stop:
            # As Lightning ends a fit on SIGTERM (exit status 0), for every stop signal sweepq
            # handles: nothing after trainer.fit() runs, as if the fit had completed.
            raise SIGTERMException

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.run is not None and not trainer.sanity_checking:
            metrics = _scalars(trainer.callback_metrics)
            epoch = self._epoch if self._started else float(trainer.current_epoch)  # validation of the batch
            self.run.log(trainer.global_step, **{**metrics, "epoch": epoch})

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The fit reached its end (max_epochs, max_steps, early stopping...): keep the last step, finish."""
        if not self.active or self._agreed(trainer, self._stop_requested()):
            return  # a stop is a preemption, never a completion
        metrics = _scalars(trainer.callback_metrics)
        if trainer.global_step > self._kept:
            self._keep(trainer, trainer.global_step, metrics)
        if self.run is not None:
            self.run.finish(metrics)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """`trainer.test()` after a completed fit: its metrics join the fit's in DONE.json."""
        if self.run is not None and self.run.final_metrics is not None:
            self.run.add_final_metrics(_scalars(trainer.callback_metrics))

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """A SIGTERM that Lightning acted on after a training batch or an epoch: keep the step just trained.

        Lightning raises SIGTERMException where its loops can be resumed, but a
        resume from the middle of a validation runs that validation again
        without its metrics (EarlyStopping then raises, ModelCheckpoint warns):
        such a stop keeps nothing, and the cell resumes from the last kept step.
        Any other exception may come mid-step: nothing is kept either. Under
        several ranks this hook cannot agree on a save with the others.
        """
        if not (self.active and self._started and isinstance(exception, SIGTERMException)):
            return
        step = trainer.global_step
        if not (trainer.state.fn == TrainerFn.FITTING and trainer.world_size == 1 and step > self._kept):
            return
        if trainer.state.stage != RunningStage.TRAINING or not (self._boundary and step == self._seen):
            where = "during validation" if trainer.state.stage == RunningStage.VALIDATING else "between optimizer steps"
            print(
                f"sweepq: the stop came {where}, where Lightning cannot resume exactly: nothing kept at step "
                f"{step}; the cell resumes from step {max(self._kept, 0)}",
                file=sys.stderr,
                flush=True,
            )
            return
        self._keep(trainer, step, _scalars(trainer.callback_metrics))

    # -- helpers ----------------------------------------------------------------

    def _keep(self, trainer: pl.Trainer, step: int, metrics: dict[str, float]) -> None:
        """Lightning's full checkpoint of `step`, kept by sweepq (every rank saves: a strategy may need all)."""
        scratch = self._scratch()
        trainer.save_checkpoint(scratch, weights_only=False)  # the full training state, said so (no info line)
        if self.run is not None:
            try:
                if scratch.is_dir():
                    raise SweepqError(
                        f"SweepqCallback: the strategy {type(trainer.strategy).__name__} saves a checkpoint as a "
                        "folder of shards; sweepq keeps single-file Lightning checkpoints only (one device, DDP)"
                    )
                self.run.commit_files(step, {CKPT_NAME: scratch}, metrics)
            finally:
                if scratch.is_file():
                    scratch.unlink()
        self._kept = step

    def _scratch(self) -> Path:
        return Path(os.environ[ENV["output_dir"]]) / SCRATCH_NAME

    def _stop_requested(self) -> bool:
        return self.run is not None and self.run.should_stop

    def _check_resumed_from_ours(self, trainer: pl.Trainer) -> None:
        """A fit given another checkpoint (or none) than sweepq's would restart or resume what sweepq did not keep."""
        if self.run is None:
            return
        ours, given = self.ckpt_path, trainer.ckpt_path
        if (ours is None) != (given is None) or (ours and given and Path(ours).resolve() != Path(given).resolve()):
            raise SweepqError(
                f"SweepqCallback: trainer.fit() was given ckpt_path={given!r}, but this cell resumes from "
                f"{'a fresh start' if ours is None else repr(ours)}: pass ckpt_path=sq.ckpt_path (sq being the "
                "SweepqCallback) to trainer.fit(), so that the cell resumes from the checkpoint sweepq verified"
            )

    @staticmethod
    def _agreed(trainer: pl.Trainer, decision: T) -> T:
        """Rank 0's decision, on every rank (only rank 0 hears sweepq's signals and knows its cadence)."""
        if trainer.world_size > 1:
            return trainer.strategy.broadcast(decision, src=0)
        return decision


class _TrustedResume(CheckpointIO):
    """The strategy's CheckpointIO, loading the checkpoint sweepq verified with `weights_only=False`.

    torch.load's default since torch 2.6 (`weights_only=True`, which Lightning
    keeps when fit() is not told otherwise) refuses a Lightning checkpoint whose
    hyperparameters hold a Path, an OmegaConf config or an enum, and the cell
    would fail on its first resume. This file is the cell's own: written by
    this program's trainer.save_checkpoint and verified byte for byte against
    the manifest sweepq wrote, it is as trusted as the program. Any other path,
    or a weights_only the user chose, is passed through unchanged.
    """

    def __init__(self, inner: CheckpointIO, path: str) -> None:
        super().__init__()
        self.inner, self.path = inner, Path(path).resolve()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("weights_only") is None and not args[1:] and Path(path).resolve() == self.path:
            kwargs["weights_only"] = False
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def _data_order_restarts(trainer: pl.Trainer) -> str | None:
    """Why this resume trains on other batches than an uninterrupted fit would, or None when it does not.

    Lightning's own test (TrainingEpochLoop.reset, which only warns on stderr):
    the fit resumed from a step inside an epoch, and a training loader cannot
    restore its position (not `_Stateful`: no state_dict/load_state_dict), so
    the epoch starts over from its first batch in a new order.
    """
    batches, loader = trainer.num_training_batches, trainer.fit_loop._combined_loader
    if loader is None or not math.isfinite(batches) or batches <= 0:
        return None
    per_epoch = math.ceil(batches / trainer.accumulate_grad_batches)  # optimizer steps an epoch
    if trainer.global_step % per_epoch == 0 or all(isinstance(dl, _Stateful) for dl in loader.flattened):
        return None
    names = sorted({type(dl).__name__ for dl in loader.flattened if not isinstance(dl, _Stateful)})
    return (
        f"the checkpoint ended mid-epoch (step {trainer.global_step}, {per_epoch} steps an epoch) and the "
        f"training loader ({', '.join(names)}) cannot resume its position: the rest of the epoch trains on "
        "other batches than an uninterrupted run (a resumable loader, e.g. torchdata's StatefulDataLoader, "
        "or a checkpoint cadence that ends epochs, makes it exact)"
    )


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """Lightning's logged metrics as floats (one-element tensors and numbers; anything else is left out)."""
    found = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found[str(name)] = float(value)
    found.pop("epoch", None)  # the callback says which epoch
    return found


def _epoch(trainer: pl.Trainer, batch_idx: int) -> float:
    """The epoch as a fraction: 2.5 is halfway through the third."""
    batches = trainer.num_training_batches
    if not math.isfinite(batches) or batches <= 0:
        return float(trainer.current_epoch)
    return trainer.current_epoch + (batch_idx + 1) / batches


__all__ = ["SweepqCallback"]
