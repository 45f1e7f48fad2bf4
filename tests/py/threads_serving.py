"""Two threads, each serving its own model: N no_grad forward calls each, while the main
thread only waits (the other threads' ops were once missing from the file).

    python tests/py/threads_serving.py --calls 20 [--inline]

--inline runs the same calls one after the other in the main thread instead (the same ops).
Prints `calls 40 threads 2`."""

import argparse
import threading

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--calls", type=int, default=20)
p.add_argument("--inline", action="store_true")
args = p.parse_args()

torch.manual_seed(0)


class Server(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(64, width)
        self.fc2 = nn.Linear(width, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Ranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 512)

    def forward(self, x):
        return self.fc(x).softmax(-1)


models = [Server(256).eval(), Ranker().eval()]
inputs = [torch.randn(32, 64), torch.randn(32, 64)]


def serve(k):
    with torch.no_grad():
        for _ in range(args.calls):
            models[k](inputs[k])


if args.inline:
    serve(0)
    serve(1)
else:
    workers = [threading.Thread(target=serve, args=(k,), name=f"serve-{k}") for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
print(f"calls {2 * args.calls} threads {0 if args.inline else 2}")
