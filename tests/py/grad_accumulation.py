"""Gradient accumulation: 4 micro-batches (forward and backward each) per optimizer step.

    python tests/py/grad_accumulation.py --steps 3 --micro 4 [--ddp]

--ddp wraps the model in DistributedDataParallel (one process, gloo) and runs every
micro-batch but the last under no_sync(), as DDP training accumulates.

Prints `steps 3 micro_batches 12`."""

import argparse

import contextlib

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--micro", type=int, default=4)
p.add_argument("--ddp", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
if args.ddp:
    import os
    import tempfile

    import torch.distributed as dist

    # a file store: no port to collide with another test's
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
micro = 0
for step in range(args.steps):
    opt.zero_grad()
    for m in range(args.micro):
        x = torch.randn(8, 32)
        last = m == args.micro - 1
        sync = model.no_sync() if args.ddp and not last else contextlib.nullcontext()
        with sync:
            (model(x).pow(2).mean() / args.micro).backward()
        micro += 1
    opt.step()
if args.ddp:
    dist.destroy_process_group()
print(f"steps {args.steps} micro_batches {micro}")
