"""torch.compile (Inductor, CPU) of a small conv net, Adam, a few steps."""
import argparse

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--how", choices=["function", "method"], default="function")
args = ap.parse_args()

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(32, 10),
)
params = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"param_bytes={params}")
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if args.how == "function":
    run = torch.compile(model)
else:
    model.compile()
    run = model
x = torch.randn(8, 3, 32, 32)
y = torch.randint(0, 10, (8,))
for step in range(args.steps):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(run(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
import torch._dynamo.utils as du
print("frames", dict(du.counters["frames"]), "graph_breaks", sum(du.counters["graph_break"].values()))
