"""Train a tiny model for STEPS steps and print "done STEPS": run alone and under `record`
with its output on a full disk (tests/record_trust.rs), it must print and exit the same."""

import sys

import torch

steps = int(sys.argv[1])
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
for _ in range(steps):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
print("done", steps)
