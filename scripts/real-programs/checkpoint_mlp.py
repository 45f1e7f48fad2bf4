"""torch.utils.checkpoint around each block of an MLP (non-reentrant and reentrant), Adam."""
import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

ap = argparse.ArgumentParser()
ap.add_argument("--reentrant", action="store_true")
args = ap.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)) for _ in range(4)
        )
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        for b in self.blocks:
            x = x + checkpoint(b, x, use_reentrant=args.reentrant)
        return self.head(x)


torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
print(f"param_bytes={sum(p.numel() * p.element_size() for p in model.parameters())}")
x = torch.randn(64, 256, requires_grad=args.reentrant)
y = torch.randint(0, 10, (64,))
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
