"""A training loop that keeps a per-step history by mistake (`leak`: a 64 x 256 float32 copy
of the output, 65,536 bytes, appended to a list every step), or the same loop without it."""
import sys

import torch
import torch.nn as nn

leak = len(sys.argv) > 1 and sys.argv[1] == "leak"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
kept = []
for step in range(steps):
    x = torch.randn(64, 256)
    out = net(x)
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if leak:
        kept.append(out.detach().clone())
