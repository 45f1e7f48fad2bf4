# `memtrack estimate`'s checkpointing program: a GPT-style model (attention with dropout, an
# MLP with dropout) trained two steps with each block checkpointed as argv[1] says: none,
# reentrant, nonreentrant (torch's recommended mode), selective (a policy that saves matmuls),
# or sequential (checkpoint_sequential over the blocks). Prints the loss's shape and "done".
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

mode = sys.argv[1]


class Block(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(0.1))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)
        x = x + F.dropout(self.proj(a.transpose(1, 2).reshape(b, t, d)), 0.1, self.training)
        return x + self.mlp(self.ln2(x))


def policy():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def save_matmuls(ctx, op, *args, **kwargs):
        if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return lambda: create_selective_checkpoint_contexts(save_matmuls)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(4)])

    def forward(self, x):
        if mode == "sequential":
            return checkpoint_sequential(self.blocks, 2, x, use_reentrant=False)
        for blk in self.blocks:
            if mode == "reentrant":
                x = checkpoint(blk, x, use_reentrant=True)
            elif mode == "nonreentrant":
                x = checkpoint(blk, x, use_reentrant=False)
            elif mode == "selective":
                x = checkpoint(blk, x, use_reentrant=False, context_fn=policy())
            else:
                x = blk(x)
        return x


model = Net().cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(2):
    x = torch.randn(8, 512, 256, device="cuda", requires_grad=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(tuple(loss.shape), "done")
