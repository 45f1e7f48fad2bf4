"""A tiny transformer language model whose blocks use activation checkpointing, trained for a
few steps on random tokens (CPU-fast, seeded).

    memtrack record -o tf.pkl -- python examples/tiny_transformer_ckpt.py
    memtrack modules tf.pkl --depth 3 --state pre-forward-ac,post-forward-ac,peak-backward

Checkpointed blocks run their forward again during backward: memtrack shows those calls as
MemTracker does (Pre-Forward-AC / Post-Forward-AC). build() and step() are what
tests/py/memtracker_reference.py runs under PyTorch's own MemTracker.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=128, d=64, heads=4, layers=2, ckpt=True, reentrant=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.ckpt = ckpt
        self.reentrant = reentrant

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=self.reentrant) if self.ckpt else b(x)
        return self.head(self.ln(x))


class LMLoss(nn.Module):
    def forward(self, logits, targets):
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def build(vocab=128, d=64, layers=2, batch=8, seq=32, seed=0, reentrant=False):
    """The model, its optimizer, a loss and one batch of tokens, all seeded."""
    torch.manual_seed(seed)
    model = TinyTransformer(vocab, d, layers=layers, reentrant=reentrant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, vocab, (batch, seq + 1))
    return model, opt, LMLoss(), tokens[:, :-1], tokens[:, 1:]


def step(model, opt, loss_fn, x, y):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--reentrant", action="store_true", help="checkpoint(use_reentrant=True)")
    args = p.parse_args()
    model, opt, loss_fn, x, y = build(d=args.d, layers=args.layers, reentrant=args.reentrant)
    for i in range(args.steps):
        loss = step(model, opt, loss_fn, x, y)
        print(f"step {i}: loss {loss:.4f}")


if __name__ == "__main__":
    main()
