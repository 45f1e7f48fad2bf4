"""GPT-2's Conv1D under CPU autocast (bfloat16): `torch.addmm` called directly, so autocast's
casts run inside the op's own call (an nn.Linear's run inside `linear`, which decomposes), then
a `bmm`, trained two steps with SGD. Exits 0 alone; under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(x.size()[:-1] + (out.size(-1),))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = Conv1D(32, 16)
        self.out = Conv1D(4, 32)

    def forward(self, x):
        h = self.proj(x)
        h = torch.bmm(h, h.transpose(1, 2)) @ h
        return self.out(h)


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.randn(2, 5, 16)
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = net(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
