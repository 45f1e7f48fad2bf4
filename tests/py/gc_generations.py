"""A loop of small modules (an LSTMCell unrolled 16 steps per training step, Adam) that counts
the garbage collector's collections by generation (gc.callbacks) and the objects the collector
tracks that one window of steps leaves behind (with the collector off in it, so that what a
collection would free still counts).

    python tests/py/gc_generations.py --steps 400 --window 50

Prints one line: `gc {"collections": [gen0, gen1, gen2], "left_per_step": N}`."""

import argparse
import gc
import json

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--window", type=int, default=50)
args = p.parse_args()

torch.manual_seed(0)
cell = nn.LSTMCell(32, 32)
head = nn.Linear(32, 10)
opt = torch.optim.Adam(list(cell.parameters()) + list(head.parameters()), lr=1e-3)
x = torch.randn(16, 8, 32)
y = torch.randint(0, 10, (8,))


def step():
    opt.zero_grad(set_to_none=True)
    h = x.new_zeros(8, 32)
    c = h
    for t in range(16):
        h, c = cell(x[t], (h, c))
    nn.functional.cross_entropy(head(h), y).backward()
    opt.step()


for _ in range(3):
    step()
gc.disable()
before = len(gc.get_objects())
for _ in range(args.window):
    step()
left = len(gc.get_objects()) - before
gc.enable()

collections = [0, 0, 0]


def count(phase, info):
    if phase == "stop":
        collections[info["generation"]] += 1


gc.callbacks.append(count)
for _ in range(args.steps):
    step()
gc.callbacks.remove(count)
print("gc " + json.dumps({"collections": collections, "left_per_step": left / args.window}))
