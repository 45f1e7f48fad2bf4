"""torchvision ResNet-18 (weights=None), SGD with momentum, a few steps on random images."""
import argparse
import sys
import time

import torch
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--size", type=int, default=64)
args = ap.parse_args()

torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None, num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(args.batch, 3, args.size, args.size)
y = torch.randint(0, 10, (args.batch,))
params = sum(p.numel() * p.element_size() for p in model.parameters())
buffers = sum(b.numel() * b.element_size() for b in model.buffers())
print(f"param_bytes={params} buffer_bytes={buffers}")
for step in range(args.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
    print(f"step {step} seconds {time.perf_counter() - t0:.4f}", file=sys.stderr)
