"""Two-rank DDP training on CPU (gloo), for `memtrack record -- python -m torch.distributed.run
--standalone --nproc-per-node 2 tests/py/ddp_mlp.py`."""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from mlp_batchnorm import build, step  # noqa: E402


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, _, loss_fn, x, y = build(width=64, blocks=2, batch=16 + 16 * rank, seed=rank)
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(int(os.environ.get("STEPS", "2"))):
        loss = step(model, opt, loss_fn, x, y)
        print(f"rank {rank} step {i}: loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
