"""A small net run under torch.inference_mode(): with the autograd keys excluded, composite
ops (linear, layer_norm, softmax) reach a dispatch mode whole instead of as their
decompositions. Exits 0 alone; under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8))
x = torch.randn(4, 32)
with torch.inference_mode():
    for _ in range(3):
        y = torch.nn.functional.softmax(net(x), -1)
print("ok")
