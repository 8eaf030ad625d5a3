"""A classic training script in the shape of nanoGPT's train.py (README.md beside it says what it keeps).

It knows nothing of sweepq. It opens `configurator.py` and `data/<dataset>/` by relative names,
trains a bigram model with real torch on uint16 token memmaps, saves out_dir/ckpt.pt every
eval_interval iterations, and continues from that file only when told `--init_from=resume`
(without it every run starts over at iteration 0 and overwrites the checkpoint).
"""

import os
import pickle
import time

import numpy as np
import torch

# Defaults, overridden by configurator.py from the command line (config files, then --key=value).
out_dir = "out"
eval_interval = 5
max_iters = 40
dataset = "tiny"
init_from = "scratch"  # or "resume": continue from out_dir/ckpt.pt
batch_size = 4
block_size = 8
learning_rate = 1e-2
seed = 1337
iter_delay = 0.0  # seconds each iteration sleeps, so that a test can stop it midway

exec(open("configurator.py").read())  # noqa: SIM115 (nanoGPT's own line: a relative name, no context)

data_dir = os.path.join("data", dataset)
vocab_size = 256
meta_path = os.path.join(data_dir, "meta.pkl")
if os.path.exists(meta_path):
    with open(meta_path, "rb") as f:
        vocab_size = pickle.load(f)["vocab_size"]
train_data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
val_data = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")


def get_batch(data: np.ndarray, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([torch.from_numpy(data[i : i + block_size].astype(np.int64)) for i in ix.tolist()])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + block_size].astype(np.int64)) for i in ix.tolist()])
    return x, y


model = torch.nn.Embedding(vocab_size, vocab_size)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
iter_num = 0
if init_from == "resume":
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    print(f"Resuming training from {out_dir} at iter {iter_num}", flush=True)
elif init_from != "scratch":
    raise ValueError(f"init_from must be scratch or resume, not {init_from!r}")
os.makedirs(out_dir, exist_ok=True)


def save() -> None:
    path = os.path.join(out_dir, "ckpt.pt")
    # Written aside and renamed, so that a kill during the save leaves the previous checkpoint whole.
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}, path + ".tmp")
    os.replace(path + ".tmp", path)
    print(f"saving checkpoint to {out_dir} at iter {iter_num}", flush=True)


while True:
    if iter_num % eval_interval == 0 and iter_num > 0:
        with torch.no_grad():
            x, y = get_batch(val_data, torch.Generator().manual_seed(0))
            val_loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab_size), y.view(-1)).item()
        print(f"step {iter_num}: val loss {val_loss:.4f}", flush=True)
        save()
    if iter_num >= max_iters:
        break
    x, y = get_batch(train_data, torch.Generator().manual_seed(seed + iter_num))
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab_size), y.view(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"iter {iter_num}: loss {loss.item():.4f}", flush=True)
    iter_num += 1
    time.sleep(iter_delay)
