"""An in-process recording (`memtrack.record`) while a thread started before the block runs
forward calls: its ops cannot be recorded, and the file says so; a thread started inside the
block is recorded.

    python tests/py/threads_before.py OUT.pkl

Prints `early_calls 10 late_calls 10`."""

import sys
import threading

import memtrack
import torch
from torch import nn

model = nn.Linear(64, 64)
x = torch.randn(8, 64)
go = threading.Event()


def serve():
    go.wait()
    with torch.no_grad():
        for _ in range(10):
            model(x)


early = threading.Thread(target=serve, name="early")
early.start()
with memtrack.record(sys.argv[1]):
    late = threading.Thread(target=serve, name="late")
    late.start()
    go.set()
    early.join()
    late.join()
print("early_calls 10 late_calls 10")
