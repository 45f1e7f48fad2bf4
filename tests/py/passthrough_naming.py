"""Two training steps of a small ViT-like encoder whose blocks hold modules that compute
nothing in backward: `drop_path = nn.Identity()` and `nn.Dropout(p=0)` return their input
itself, so autograd runs no node of theirs. Every backward op runs a node that a Linear,
LayerNorm, GELU, attention or the head created.

    passthrough_naming.py [--steps N]

build() and step() as in examples/, so tests/py/memtracker_reference.py can run MemTracker on it.
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * dim, dim), nn.Dropout(0.0)
        )

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.drop_path(self.attn(h, h, h, need_weights=False)[0])
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ViT(nn.Module):
    def __init__(self, dim=32, depth=2, classes=4):
        super().__init__()
        self.embed = nn.Linear(16, dim)
        self.pos_drop = nn.Dropout(0.0)
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.pre_logits = nn.Identity()
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.blocks(self.pos_drop(self.embed(x)))
        return self.head(self.pre_logits(self.norm(x).mean(1)))


def build():
    torch.manual_seed(0)
    model = ViT()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8, 16), torch.randint(0, 4, (4,))
    return model, opt, nn.CrossEntropyLoss(), x, y


def step(model, opt, loss_fn, x, y):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    model, opt, loss_fn, x, y = build()
    for _ in range(args.steps):
        step(model, opt, loss_fn, x, y)


if __name__ == "__main__":
    main()
