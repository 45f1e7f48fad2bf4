"""A training loop whose DataLoader starts its worker with `spawn`: a second Python process
that imports torch (and so is recorded too) and must not take the program's -o file."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=16, num_workers=1, multiprocessing_context="spawn")
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
