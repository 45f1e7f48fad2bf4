"""A training loop that keeps a per-step history by mistake, or the same loop without it.

    per_step_history.py leak|module|none [STEPS]

`leak`: a 64 x 256 float32 copy of the output (65,536 bytes) appended to a list after every
step, outside any module; `module`: a module (`Sequential.1`, between the two linears) that
keeps a copy of its 64 x 512 float32 input (131,072 bytes) every forward; `none`: neither."""
import sys

import torch
import torch.nn as nn

mode = sys.argv[1] if len(sys.argv) > 1 else "none"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6


class Keep(nn.Module):
    def __init__(self, on):
        super().__init__()
        self.on = on
        self.kept = []

    def forward(self, x):
        if self.on:
            self.kept.append(x.detach().clone())
        return x


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, 512), Keep(mode == "module"), nn.ReLU(), nn.Linear(512, 256))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
kept = []
for step in range(steps):
    x = torch.randn(64, 256)
    out = net(x)
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if mode == "leak":
        kept.append(out.detach().clone())
