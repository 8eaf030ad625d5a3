"""The bundled example: a small text classifier trained on generated data, on the CPU.

The data stands in for "analysis of LLM outputs": token sequences labelled by
a hidden rule with label noise, so validation accuracy lands near 70 % and
depends on the learning rate and width. It is generated from a seed (nothing
to download) and the whole training state is checkpointed, so an interrupted
cell resumes bit-exactly.

cfg keys: lr, width, epochs, batch_size, seed, data_seed, n_train, n_val,
vocab, seq_len, dropout, weight_decay, step_delay (seconds slept per step, to
play with interruptions on a fast machine).
"""

from __future__ import annotations

import math
import random
import time
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from sweepq import Run


def make_datasets(
    n_train: int, n_val: int, vocab: int, seq_len: int, seed: int, noise: float = 0.2
) -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    """Sequences whose label is a hidden linear rule over token counts, with label noise."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(vocab, generator=g)
    n = n_train + n_val
    # Skewed token frequencies, as in text.
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float32).sqrt()
    tokens = torch.multinomial(weights.expand(n, vocab), seq_len, replacement=True, generator=g)
    score = teacher[tokens].mean(dim=1)
    labels = (score > score.median()).long()
    flip = torch.rand(n, generator=g) < noise
    labels = torch.where(flip, 1 - labels, labels)
    return (
        torch.utils.data.TensorDataset(tokens[:n_train], labels[:n_train]),
        torch.utils.data.TensorDataset(tokens[n_train:], labels[n_train:]),
    )


class Classifier(nn.Module):
    def __init__(self, vocab: int, width: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, width, mode="mean")
        self.head = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout), nn.Linear(width, 2))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


@torch.no_grad()
def accuracy(model: nn.Module, data: torch.utils.data.TensorDataset) -> float:
    model.eval()
    tokens, labels = data.tensors
    acc = (model(tokens).argmax(dim=1) == labels).float().mean().item()
    model.train()
    return acc


def train(cfg: dict[str, Any], run: Run) -> dict[str, Any] | None:
    epochs = int(cfg.get("epochs", 150))
    batch_size = int(cfg.get("batch_size", 64))
    vocab, seq_len = int(cfg.get("vocab", 128)), int(cfg.get("seq_len", 32))
    data_seed = int(cfg.get("data_seed", 1234))
    train_set, val_set = make_datasets(
        int(cfg.get("n_train", 1024)), int(cfg.get("n_val", 1024)), vocab, seq_len, data_seed
    )

    # Seed every RNG the step may touch: python's and numpy's too, so that the
    # whole training state (RNGs included) is reproducible, not only the weights.
    random.seed(int(cfg.get("seed", 0)))
    np.random.seed(int(cfg.get("seed", 0)))
    torch.manual_seed(int(cfg.get("seed", 0)))
    model = Classifier(vocab, int(cfg.get("width", 64)), float(cfg.get("dropout", 0.1)))
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg.get("weight_decay", 0.01)))
    steps_per_epoch = math.ceil(len(train_set) / batch_size)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    # The sampler gets a generator of its own: StatefulDataLoader also draws a
    # worker seed from the loader's generator at each epoch, a draw its resume
    # does not replay, so sharing one generator changes the next epoch's order.
    seed = int(cfg.get("seed", 0))
    with warnings.catch_warnings():
        # torchdata 0.11's constructor calls torch.set_vital, which torch deprecated: a UserWarning in every
        # cell's stderr.log that says nothing about this training. Only that message, only here.
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
        loader = StatefulDataLoader(
            train_set,
            batch_size=batch_size,
            sampler=RandomSampler(train_set, generator=torch.Generator().manual_seed(seed)),
            generator=torch.Generator().manual_seed(seed + 1),
        )
    state: dict[str, Any] = {
        "model": model,
        "optimizer": opt,
        "scheduler": sched,
        "loader": loader,
        "step": 0,
        "epoch": 0,
        "best_val_acc": None,
        "val_acc": None,
    }
    run.restore(state)
    run.set_total(total, epochs)
    loss_fn = nn.CrossEntropyLoss()
    delay = float(cfg.get("step_delay", 0.0))

    while state["epoch"] < epochs:
        epoch = state["epoch"]
        for tokens, labels in loader:
            loss = loss_fn(model(tokens), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            state["step"] += 1
            step = state["step"]
            run.log(step, loss=loss.item(), epoch=epoch + (step - epoch * steps_per_epoch) / steps_per_epoch)
            if delay:
                time.sleep(delay)
            if run.should_stop:
                run.checkpoint(state, step, force=True)
                return None
            if step % steps_per_epoch:  # the end of an epoch is checkpointed after evaluation
                run.checkpoint(state, step)
        val_acc = accuracy(model, val_set)
        state["epoch"] = epoch + 1
        state["val_acc"] = val_acc
        best = state["best_val_acc"]
        improved = best is None or val_acc > best
        state["best_val_acc"] = val_acc if improved else best
        run.log(state["step"], val_acc=val_acc, epoch=epoch + 1)
        # A new best is always committed (retention keeps it): the best model stays loadable.
        run.checkpoint(state, state["step"], metrics={"val_acc": val_acc}, force=improved or run.should_stop)
        if run.should_stop:
            return None
    return {"val_acc": state["val_acc"], "best_val_acc": state["best_val_acc"]}
