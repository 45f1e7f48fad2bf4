"""A training step that also runs an unrelated Python tool in a subprocess (as programs run
evaluation scripts or converters): the tool imports torch, so it is recorded too, but it is
not a multiprocessing worker and must not be named like one.

With `--tool-only` it is that tool: one small op, nothing else."""

import subprocess
import sys

import torch
from torch import nn

if "--tool-only" in sys.argv:
    torch.ones(16).sum()
    sys.exit(0)

model = nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 8)).sum().backward()
opt.step()
subprocess.run([sys.executable, __file__, "--tool-only"], check=True)
