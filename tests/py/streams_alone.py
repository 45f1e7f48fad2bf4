"""A program whose streams must read the same under `memtrack record` as alone
(tests/record_never_raises.rs): modules made under FakeTensorMode (their storages are meta,
whose data pointer torch warns about), a traceback the program prints from a nested module's
forward, then a KeyboardInterrupt raised in a nested module's forward, uncaught (Python prints
it and dies by SIGINT)."""

import sys
import traceback
import warnings

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

warnings.simplefilter("default")  # every warning shown, once per location


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.blocks(x))


class Stop(nn.Module):
    def forward(self, x):
        raise KeyboardInterrupt


with FakeTensorMode():  # the sizes, without the memory
    out = Net()(torch.randn(4, 8))
print("fake output", tuple(out.shape))

net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
net(torch.randn(4, 8)).sum().backward()
opt.step()
try:
    net(torch.randn(4, 7))  # in Net.blocks.0.fc: mat1 and mat2 shapes cannot be multiplied
except RuntimeError:
    sys.stderr.write(traceback.format_exc())
net.blocks.add_module("stop", Stop())
net(torch.randn(4, 8))
