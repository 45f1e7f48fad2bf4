"""A small regression fitted by LBFGS, whose step(closure) calls the closure several times (its
line search), with forward hooks of the program's own collecting features, as a probing script
does.

    python tests/py/lbfgs_hooks.py [STEPS]

Prints the loss after each step and the features the hooks saw."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
features = []
model[1].register_forward_hook(lambda mod, args, out: features.append(out.shape[1]))
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, history_size=5)
x = torch.randn(64, 8)
y = x.sum(1, keepdim=True).sin()


def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(steps):
    loss = opt.step(closure)
    print(f"step {step}: loss {loss.item():.4f}")
print(f"hooks saw {len(features)} forwards of {features[0]} features")
