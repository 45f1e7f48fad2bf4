"""A generation loop under torch.no_grad: a small decoder called once per new token, no
optimizer, no backward. Every call is a forward-only iteration.

    python tests/py/nograd_generation.py --tokens 18

Prints `forwards N backward_ops 0`."""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=18)
args = p.parse_args()


class Decoder(nn.Module):
    def __init__(self, vocab=50, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.out = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids).mean(dim=1)
        return self.out(torch.tanh(self.mix(h)))


torch.manual_seed(0)
model = Decoder().eval()
ids = torch.zeros(2, 1, dtype=torch.long)
forwards = 0
with torch.no_grad():
    for _ in range(args.tokens):
        logits = model(ids)
        forwards += 1
        nxt = logits.argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
print(f"forwards {forwards} backward_ops 0")
