"""Selective activation checkpointing (torch.utils.checkpoint with a context_fn): torch runs
the forward and the recomputation under its own dispatch modes, which save mm outputs and
recompute the rest. Exits 0 alone; under `memtrack record` it must too."""

import functools

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

torch.manual_seed(0)


def policy(ctx, op, *args, **kwargs):
    if op == torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


sac = functools.partial(create_selective_checkpoint_contexts, policy)
blk = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
opt = torch.optim.SGD(blk.parameters(), lr=0.1)
x = torch.randn(8, 32, requires_grad=True)
for _ in range(2):
    y = checkpoint(blk, x, use_reentrant=False, context_fn=sac)
    y.sum().backward()
    opt.step()
    opt.zero_grad()
print("ok")
