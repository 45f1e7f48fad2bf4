"""A training loop to watch (tests/watch_tui.rs): STEPS steps of a small MLP, about PAUSE
seconds each, printing one line a step and whether its stdout is a terminal, so a test can
tell its output is what it would be without memtrack.

    python watch_loop.py STEPS [PAUSE]
"""

import sys
import time

import torch
import torch.nn as nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
print(f"stdout is a terminal: {sys.stdout.isatty()}", flush=True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters())
kept = []  # a little more every step: growth has something to see
for step in range(steps):
    loss = model(torch.randn(64, 256)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    kept.append(torch.zeros(1024))
    print(f"step {step}", flush=True)
    time.sleep(pause)
print("done", flush=True)
