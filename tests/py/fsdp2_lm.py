"""A two-block language model sharded with FSDP2 (`fully_shard`) over a one-rank gloo group on
the CPU, trained a few steps with AdamW (under torchrun, over its group).

    memtrack record -o run.pkl -- python tests/py/fsdp2_lm.py
    memtrack record -o run.pkl -- torchrun --standalone --nproc-per-node 2 tests/py/fsdp2_lm.py
    python tests/py/fsdp2_lm.py --memtracker     # PyTorch's MemTracker instead: JSON on stdout

With --memtracker the same steps run under torch.distributed._tools.mem_tracker.MemTracker
(its module stats reset before each step, as memtrack keeps them per iteration) and its tables
are printed as JSON shaped like `memtrack modules --format json --iteration all`
(memtracker_reference.py's shape).
"""

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

VOCAB, DIM, SEQ, BATCH = 64, 32, 16, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class FSDPLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids):
        x = self.tok(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def build():
    torch.manual_seed(0)
    model = FSDPLM()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return model, opt, ids


def step(model, opt, ids):
    logits = model(ids)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--memtracker", action="store_true")
    args = p.parse_args()
    if "RANK" in os.environ:  # under torchrun: its group (--memtracker prints rank 0's)
        dist.init_process_group("gloo")
    else:
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        if args.memtracker:
            sys.path.insert(0, os.path.dirname(__file__))
            from memtracker_reference import module_stats, snapshot
            from torch.distributed._tools.mem_tracker import MemTracker

            mt = MemTracker()
            iterations = []
            with mt:
                model, opt, ids = build()
                for i in range(args.steps):
                    mt.reset_mod_stats()
                    step(model, opt, ids)
                    iterations.append({"iteration": i + 1, "modules": module_stats(mt)})
            if dist.get_rank() == 0:
                peak = snapshot(mt.get_tracker_snapshot("peak"))
                json.dump({"iterations": iterations, "peak": peak}, sys.stdout)
        else:
            model, opt, ids = build()
            for i in range(args.steps):
                print(f"step {i}: loss {step(model, opt, ids):.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
