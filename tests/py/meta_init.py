"""A model built on the meta device (fake and meta tensors), then materialised and trained;
plus a FakeTensorMode trace. Exits 0 alone; under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)
with torch.device("meta"):
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    net(torch.randn(4, 32))  # runs on meta: no data
net = net.to_empty(device="cpu")
for m in net:
    if isinstance(m, nn.Linear):
        m.reset_parameters()
opt = torch.optim.Adam(net.parameters())
for _ in range(2):
    loss = net(torch.randn(4, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

from torch._subclasses.fake_tensor import FakeTensorMode

with FakeTensorMode():
    fnet = nn.Linear(8, 8)
    fnet(torch.randn(2, 8)).sum().backward()
print("ok")
