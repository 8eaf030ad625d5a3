"""A classic training script, written the way people write them: it knows nothing of sweepq.

    python classic.py --data data.json --lr 0.1 --seed 1

It trains a tiny model, saves it to --save (model.pt, relative to the working
directory), then loads it back and prints its test score: two runs sharing a
working directory overwrite each other's model.pt, and one may print the
other's score.
"""

from __future__ import annotations

import argparse
import json

import torch

parser = argparse.ArgumentParser(description="train a tiny regression model")
parser.add_argument("--data", default="data.json", help="a JSON file with x and y")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--save", default="model.pt", help="where to save the trained model")
args = parser.parse_args()

with open(args.data) as f:
    data = json.load(f)
x = torch.tensor(data["x"])
y = torch.tensor(data["y"])
train_x, test_x, train_y, test_y = x[:48], x[48:], y[:48], y[48:]

torch.manual_seed(args.seed)
model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
for _ in range(args.steps):
    loss = torch.nn.functional.mse_loss(model(train_x), train_y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():  # plain SGD (torch.optim costs seconds to import on a small machine)
        for w in model.parameters():
            w.sub_(args.lr * w.grad)
torch.save(model.state_dict(), args.save)
print(f"saved {args.save} after {args.steps} steps", flush=True)

model.load_state_dict(torch.load(args.save))
with torch.no_grad():
    score = torch.nn.functional.mse_loss(model(test_x), test_y).item()
print(f"test_mse {score:.6f}", flush=True)
