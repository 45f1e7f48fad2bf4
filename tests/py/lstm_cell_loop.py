"""An LSTMCell unrolled over 20 time steps per training step (the cell is the only top-level
module, called 20 times per step), with an optimizer: an iteration is one optimizer step.

    python tests/py/lstm_cell_loop.py --steps 33

Prints `steps N cell_calls M head_calls K` for tests to compare with."""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=33)
p.add_argument("--seq", type=int, default=20)
args = p.parse_args()

torch.manual_seed(0)
cell = nn.LSTMCell(8, 16)
head = nn.Linear(16, 1)
opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.01)
x = torch.randn(args.seq, 4, 8)
y = torch.randn(4, 1)
cell_calls = head_calls = 0
for step in range(args.steps):
    opt.zero_grad()
    h = torch.zeros(4, 16)
    c = torch.zeros(4, 16)
    for t in range(args.seq):
        h, c = cell(x[t], (h, c))
        cell_calls += 1
    loss = ((head(h) - y) ** 2).mean()
    head_calls += 1
    loss.backward()
    opt.step()
print(f"steps {args.steps} cell_calls {cell_calls} head_calls {head_calls}")
