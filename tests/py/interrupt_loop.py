"""A loop of small ops interrupted by SIGINT from a timer thread: the KeyboardInterrupt must
reach the program (it catches it and says so), wherever it is raised, the agent's per-op code
included. The ops write into the same tensors (no storage dies, so no weakref callback runs:
docs/record.md, Known limits). Exits 0 alone; under `memtrack record` it must too."""

import os
import signal
import threading
import time

import torch

x = torch.randn(8, 8)
y = torch.empty(8, 8)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
try:
    while time.monotonic() - start < 20:
        torch.mm(x, x, out=y)
        torch.tanh(y, out=x)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
