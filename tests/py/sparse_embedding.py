"""nn.Embedding(sparse=True) trained with SGD: its weight's gradient is a sparse COO tensor
(issue 26). Exits 0 alone; under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 32, sparse=True)
        self.fc = nn.Linear(32, 1)

    def forward(self, idx):
        return self.fc(self.emb(idx).mean(1))


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(3):
    idx = torch.randint(0, 1000, (16, 8))
    loss = net(idx).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    assert net.emb.weight.grad.layout == torch.sparse_coo
    opt.step()
print("ok")
