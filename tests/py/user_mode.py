"""An MLP trained under the program's own TorchDispatchMode (one that counts ops and runs
them, as FlopCounterMode does): the ops it runs are the program's. Exits 0 alone; under
`memtrack record` it must too, with every op recorded."""

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


class Counting(TorchDispatchMode):
    ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        Counting.ops += 1
        return func(*args, **(kwargs or {}))


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(16, 32)
for _ in range(2):
    with Counting():
        loss = net(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("ops", Counting.ops)
