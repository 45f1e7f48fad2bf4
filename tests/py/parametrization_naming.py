"""A few training steps of a small net whose layers are parametrized: `spectral_norm` on the
first Linear, `weight_norm` on the second (torch.nn.utils.parametrizations). Each
parametrization is a module (`Sequential.0.parametrizations.weight.0`) that runs inside its
layer's forward, reading the weight; it first runs inside register_parametrization, before it
is attached to the layer.

    parametrization_naming.py [--steps N]

build() and step() as in examples/, so tests/py/memtracker_reference.py can run MemTracker on it.
"""

import argparse

import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm, weight_norm


def build():
    torch.manual_seed(0)
    model = nn.Sequential(
        spectral_norm(nn.Linear(16, 32)), nn.ReLU(), weight_norm(nn.Linear(32, 4))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, nn.MSELoss(), torch.randn(8, 16), torch.randn(8, 4)


def step(model, opt, loss_fn, x, y):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()
    model, opt, loss_fn, x, y = build()
    for _ in range(args.steps):
        step(model, opt, loss_fn, x, y)


if __name__ == "__main__":
    main()
