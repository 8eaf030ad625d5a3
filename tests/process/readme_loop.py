"""The manual's training loop, run for real: the ```python block of docs/guide/training.md that
defines `train`, as printed.

The block leaves `build`, `step`, `evaluate` and `steps_per_epoch` to the reader; the module
written here defines them around a tiny real torch model, so a test trains exactly the loop
the manual shows (an edit of that loop is what the tests then run).
The validation score is made up so that a test knows its best epoch: `1 - 0.1 * |epoch - peak|`
with `peak` from the cfg.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO_ROOT

_PY_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

HELPERS = """
import torch

steps_per_epoch = 3
_evals = {"n": 0, "peak": 1}


def build(cfg):
    torch.manual_seed(int(cfg.get("seed", 0)))
    _evals.update(n=0, peak=int(cfg.get("peak", 1)))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100)
    g = torch.Generator().manual_seed(1)
    loader = [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(steps_per_epoch)]
    return model, opt, sched, loader


def step(model, opt, sched, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    sched.step()
    return float(loss)


def evaluate(model):
    # the attempt's n-th evaluation (epoch n of a cell that ran once); build() counts from 0 again
    _evals["n"] += 1
    return 1.0 - 0.1 * abs(_evals["n"] - _evals["peak"])
"""


LOOP_PAGE = REPO_ROOT / "docs" / "guide" / "training.md"


def readme_train() -> str:
    """The training API page's ```python block that defines `train(cfg, run)`."""
    text = LOOP_PAGE.read_text()
    (block,) = [b for b in _PY_FENCE.findall(text) if "def train(cfg: dict, run: sweepq.Run)" in b]
    return block


def write_module(folder: Path, name: str = "loop") -> Path:
    """`folder/<name>.py`: the helpers, then the manual's loop as printed."""
    path = folder / f"{name}.py"
    path.write_text(HELPERS + "\n\n" + readme_train())
    return path
