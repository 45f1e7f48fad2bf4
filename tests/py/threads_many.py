"""Many short threads, each running one forward and backward of a shared model, one thread at
a time or several at once (once recorded as
"4 ops, 312 iterations" for 1,000 threads, with a module peak above the run's).

    python tests/py/threads_many.py --threads 200 [--at-once 4] [--inline]

--inline runs the same forward and backward calls in the main thread instead (the same ops).
Prints `threads 200 calls 200`."""

import argparse
import threading

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=200)
p.add_argument("--at-once", type=int, default=1)
p.add_argument("--inline", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 8))
x = torch.randn(16, 32)


def work():
    model(x).sum().backward()


if args.inline:
    for _ in range(args.threads):
        work()
else:
    done = 0
    while done < args.threads:
        batch = [threading.Thread(target=work) for _ in range(min(args.at_once, args.threads - done))]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        done += len(batch)
print(f"threads {0 if args.inline else args.threads} calls {args.threads}")
