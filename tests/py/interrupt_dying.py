"""A loop of small ops whose every output replaces the last (a storage dies at each op, so
the agent's weakref callback runs about as often as its per-op code), interrupted by SIGINT
from a timer thread after each DELAY in turn: the KeyboardInterrupt must reach the program
(it catches it and says so), also when raised as that callback starts. Exits 0 alone; under
`memtrack record` it must too.

    interrupt_dying.py [DELAY]...
"""

import os
import signal
import sys
import threading
import time

import torch

# each delay its own SIGINT, one after the other in this process: each lands at another point
# of the agent's code
delays = [float(d) for d in sys.argv[1:]] or [0.5]
x = torch.randn(8, 8)
w = torch.randn(8, 8) / 8
for delay in delays:
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        while time.monotonic() - start < delay + 10:
            x = torch.tanh(x @ w)
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
