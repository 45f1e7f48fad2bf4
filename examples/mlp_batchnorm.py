"""An MLP with BatchNorm, trained for a few steps on random data (CPU-fast, seeded).

    memtrack record -o mlp.pkl -- python examples/mlp_batchnorm.py
    memtrack modules mlp.pkl --depth 3

The model and its inputs come from build() so tests/py/memtracker_reference.py can run PyTorch's
own MemTracker on exactly the same thing.
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.bn = nn.BatchNorm1d(width)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.fc(x)))


class MLP(nn.Module):
    def __init__(self, width=256, blocks=4, classes=10):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(x))


def build(width=256, blocks=4, batch=64, seed=0):
    """The model, its optimizer, a loss and one batch of inputs, all seeded."""
    torch.manual_seed(seed)
    model = MLP(width, blocks)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    return model, opt, nn.CrossEntropyLoss(), x, y


def step(model, opt, loss_fn, x, y):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    model, opt, loss_fn, x, y = build(args.width, args.blocks, args.batch)
    for i in range(args.steps):
        loss = step(model, opt, loss_fn, x, y)
        print(f"step {i}: loss {loss:.4f}")


if __name__ == "__main__":
    main()
