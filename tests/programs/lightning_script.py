"""A Lightning script as its community writes one, plus sweepq's one line (SweepqCallback).

    python lightning_script.py --max_epochs=6 --lr=0.05     # on its own: prints the final weights' sha

A regression MLP in a LightningModule, its data in a LightningDataModule,
argparse for the options, a resumable data loader (torchdata's
StatefulDataLoader, as Lightning's docs advise for mid-epoch resume) and
Lightning's own ModelCheckpoint and CSV logs. `--hold=12:train,16:val` is for
tests: attempt n waits after the n-th step given (or in the validation that
follows it) until a SIGTERM arrives, so that a test can interrupt it at a
known step without racing it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from sweepq.integrations.lightning import SweepqCallback


class Regressor(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y), prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self(x), y))

    def on_train_start(self) -> None:
        print(f"training starts at global step {self.trainer.global_step}", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"], momentum=0.9)


class RegressionData(L.LightningDataModule):
    def __init__(self, data_dir: Path = Path("data"), batch_size: int = 16, plain_loader: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()  # a Path among them: torch.load's weights_only=True refuses it

    def prepare_data(self) -> None:
        """Written once, as a download would be: a synthetic regression set."""
        path = self.hparams["data_dir"] / "regression.pt"
        if not path.exists():
            g = torch.Generator().manual_seed(1234)
            x = torch.randn(192, 8, generator=g)
            y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(192, 1, generator=g)
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"x": x, "y": y}, path)

    def setup(self, stage: str) -> None:
        data = torch.load(self.hparams["data_dir"] / "regression.pt")
        x, y = data["x"], data["y"]
        self.train_set, self.val_set = TensorDataset(x[:128], y[:128]), TensorDataset(x[128:], y[128:])

    def train_dataloader(self):
        # torch's DataLoader (--plain_loader), as most scripts use, cannot resume its position mid-epoch.
        loader = DataLoader if self.hparams["plain_loader"] else StatefulDataLoader
        return loader(self.train_set, batch_size=self.hparams["batch_size"], shuffle=True)

    def val_dataloader(self):
        return StatefulDataLoader(self.val_set, batch_size=self.hparams["batch_size"])

    def test_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams["batch_size"])


class HoldAt(Callback):
    """For tests: attempt n waits at the n-th `STEP:WHERE` of --hold until a SIGTERM arrives.

    WHERE is `train` (after training step STEP) or `val` (in the validation that follows it).
    """

    def __init__(self, holds: str) -> None:
        attempt = int(os.environ.get("SWEEPQ_ATTEMPT", "1"))
        plan = [h.split(":") for h in holds.split(",")]
        self.step, self.where = (int(plan[attempt - 1][0]), plan[attempt - 1][1]) if attempt <= len(plan) else (0, "")

    def _hold(self, trainer: L.Trainer, where: str) -> None:
        if where == self.where and trainer.global_step == self.step and not trainer.received_sigterm:
            print(f"holding at step {self.step} ({where})", flush=True)
            while not trainer.received_sigterm:
                time.sleep(0.01)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._hold(trainer, "train")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking:
            self._hold(trainer, "val")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", type=Path, default=Path("data"))
    parser.add_argument("--max_epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hold", default="")
    parser.add_argument("--plain_loader", action="store_true")
    parser.add_argument("--test", action="store_true")  # trainer.test() after the fit
    parser.add_argument("--devices", type=int, default=1)  # 2 with --strategy=ddp: the ranks torchrun started
    parser.add_argument("--strategy", default="auto")
    args = parser.parse_args()

    L.seed_everything(args.seed)
    model = Regressor(hidden=args.hidden, lr=args.lr)
    data = RegressionData(data_dir=args.data_dir, batch_size=args.batch_size, plain_loader=args.plain_loader)
    sq = SweepqCallback()
    callbacks: list[Callback] = [ModelCheckpoint(monitor="val_loss", save_last=True), sq]
    if args.hold:
        callbacks.insert(0, HoldAt(args.hold))
    trainer = L.Trainer(
        max_epochs=args.max_epochs,
        accelerator="cpu",
        devices=args.devices,
        strategy=args.strategy,
        deterministic=True,
        log_every_n_steps=1,
        logger=CSVLogger("logs"),
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=data, ckpt_path=sq.ckpt_path)
    if args.test:
        print(f"test results {trainer.test(model, datamodule=data)}", flush=True)
    weights = b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values())
    print(f"final global_step {trainer.global_step} weights_sha {hashlib.sha256(weights).hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
