"""A model with a lazy layer (nn.LazyLinear), trained 3 SGD steps: its parameters are
uninitialized (UninitializedParameter, which takes no hooks) when the global forward
pre-hooks run for the first call, and become plain parameters, the same objects, in the
layer's own pre-hook."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lazy = nn.LazyLinear(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.lazy(x)))


torch.manual_seed(0)
model = Net()
model(torch.randn(2, 8))  # materializes the lazy layer (as a real program's dry run does)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 8)
for _ in range(3):
    opt.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()
print("ok")
