"""Two training steps whose forward and backward run inside optimizer.step(closure), as LBFGS
and Lightning run them, on a net whose last layer's output is the net's output (ResNet's fc).

    closure_naming.py lbfgs|adam
"""

import sys

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc(self.body(x))


def main():
    model = Net()
    x, y = torch.randn(16, 32), torch.randn(16, 4)
    if sys.argv[1] == "lbfgs":
        opt = torch.optim.LBFGS(model.parameters(), max_iter=1)
    else:
        opt = torch.optim.Adam(model.parameters())
    loss_fn = nn.MSELoss()

    def closure():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)


if __name__ == "__main__":
    main()
