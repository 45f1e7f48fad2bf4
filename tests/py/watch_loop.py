"""A training loop for `record --watch` tests: an MLP trained step by step, printing a line
per step (and a progress line with a carriage return), slow enough to be watched.

    python watch_loop.py STEPS [SECONDS_PER_STEP]
"""

import sys
import time

import torch
import torch.nn as nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters())
kept = []  # grows a little every step: something for growth to see
for step in range(steps):
    x = torch.randn(64, 256)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    kept.append(torch.zeros(1024))
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(pause)
print("done", flush=True)
