"""Model A trained for 3 steps, then model B for 3 (each with its own optimizer): B's first
forward begins a new iteration.

    python tests/py/two_models.py --steps-a 3 --steps-b 3 [--checkpoint]

--checkpoint runs each model's first layer under activation checkpointing (recomputed in
backward).

Prints `steps_a 3 steps_b 3`."""

import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--steps-a", type=int, default=3)
p.add_argument("--steps-b", type=int, default=3)
p.add_argument("--checkpoint", action="store_true")
args = p.parse_args()

torch.manual_seed(0)


def first(layer, x):
    if args.checkpoint:
        return checkpoint(layer, x, use_reentrant=False)
    return layer(x)


def train(model, steps, width):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, width)
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(torch.relu(first(self.fc1, x)))


class B(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 256)
        self.out = nn.Linear(256, 4)

    def forward(self, x):
        return self.out(torch.relu(first(self.fc, x)))


train(A(), args.steps_a, 32)
train(B(), args.steps_b, 48)
print(f"steps_a {args.steps_a} steps_b {args.steps_b}")
