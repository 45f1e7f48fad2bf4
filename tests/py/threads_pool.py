"""A ThreadPoolExecutor serving inference requests of one model while the main thread trains
another for a few steps (other threads' ops were once missing, their calls counted as
iterations).

    python tests/py/threads_pool.py --steps 5 --requests 32 --workers 4 [--inline]

--inline serves the requests in the main thread after training instead (the same ops).
Prints `steps 5 requests 32`."""

import argparse
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--requests", type=int, default=32)
p.add_argument("--workers", type=int, default=4)
p.add_argument("--inline", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
server = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval()
trained = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(trained.parameters(), lr=0.1)
requests = [torch.randn(8, 64) for _ in range(args.requests)]


def serve(r):
    with torch.no_grad():
        return server(r).argmax(-1)


def train():
    for _ in range(args.steps):
        opt.zero_grad()
        nn.functional.cross_entropy(trained(torch.randn(32, 64)), torch.randint(0, 10, (32,))).backward()
        opt.step()


if args.inline:
    train()
    answers = [serve(r) for r in requests]
else:
    with ThreadPoolExecutor(args.workers) as pool:
        futures = [pool.submit(serve, r) for r in requests]
        train()
        answers = [f.result() for f in futures]
assert len(answers) == args.requests
print(f"steps {args.steps} requests {args.requests}")
