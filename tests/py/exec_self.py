"""A launcher that re-executes itself after importing torch (as some launchers and
`torch.distributed.elastic` wrappers do): the process keeps its pid and becomes a new Python
image, which must be recorded too.

The first image trains one step of a small model, then `os.execv`s this script with
`--after-exec`; the second trains two steps of a different model, printing how many steps
each image ran."""

import os
import sys

import torch
from torch import nn


def train(model, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()


if "--after-exec" in sys.argv:
    train(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)), 2)
    print("after exec: 2 steps", flush=True)
else:
    train(nn.Linear(8, 1), 1)
    print("before exec: 1 step", flush=True)
    os.execv(sys.executable, [sys.executable, __file__, "--after-exec"])
