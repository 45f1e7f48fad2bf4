"""torch.export of a module, one call of the exported program's module, then the source module
trained with an optimizer: the exported call is no optimizer step's, and the source's first
forward is a forward (not part of a backward or a step).

    python tests/py/export_then_source.py --steps 3

Prints `steps N`."""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

torch.manual_seed(0)


class Source(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


net = Source()
x = torch.randn(8, 16)
exported = torch.export.export(net, (x,)).module()
exported(x)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(args.steps):
    opt.zero_grad()
    net(x).sum().backward()
    opt.step()
print(f"steps {args.steps}")
