"""A loop of small ops whose every output replaces the last (a storage dies at each op, so
the agent's weakref callback runs about as often as its per-op code), interrupted by SIGINT
from a timer thread: the KeyboardInterrupt must reach the program (it catches it and says
so), also when raised as that callback starts. Exits 0 alone; under `memtrack record` it must
too."""

import os
import signal
import sys
import threading
import time

import torch

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
x = torch.randn(8, 8)
w = torch.randn(8, 8) / 8
threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
try:
    while time.monotonic() - start < delay + 10:
        x = torch.tanh(x @ w)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
