"""A training loop whose DataLoader starts its worker with `spawn`: a second Python process
that imports torch (and so is recorded too) and must not take the program's -o file.

    spawn_workers.py [slow-exit]

slow-exit: the worker is slow to leave at its exit (an atexit handler that sleeps), so the
DataLoader ends it with SIGTERM once its wait is over (made short here: 0.5 s)."""

import atexit
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import _utils


def slow_exit(worker_id):
    atexit.register(time.sleep, 60)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    slow = "slow-exit" in sys.argv
    if slow:
        _utils.MP_STATUS_CHECK_INTERVAL = 0.5  # how long the loader waits for a worker to leave
    loader = DataLoader(
        data,
        batch_size=16,
        num_workers=1,
        multiprocessing_context="spawn",
        worker_init_fn=slow_exit if slow else None,
    )
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
