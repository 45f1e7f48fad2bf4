"""Reference cycles that hold tensors, for `memtrack record --cycles` (tests/field_cycles.rs).

1. an object whose attributes refer to itself and to a 1 MiB tensor (262144 float32);
2. a list that contains itself and a 4000-byte tensor;
3. a closure that refers to itself through its cell, and to a 40000-byte tensor;
4. an exception kept in a local of the frame it was raised in (frame -> exception ->
   traceback -> frame), the frame holding a 2 MiB tensor in another local.
The garbage collector frees them all at the explicit gc.collect() between the two op runs.
"""
import gc
import sys

import torch


class Holder:
    def __init__(self, n):
        self.t = torch.zeros(n, dtype=torch.float32)
        self.me = self


def closure():
    weights = torch.zeros(10_000, dtype=torch.float32)

    def step():
        return weights, step

    return step


def failing_step():
    activations = torch.zeros(512 * 1024, dtype=torch.float32)
    try:
        raise ValueError("kept alive by its own frame")
    except ValueError as e:
        error = e  # noqa: F841  (the cycle: frame -> error -> traceback -> frame)


def make():
    Holder(256 * 1024)
    loop = [torch.empty(1000, dtype=torch.float32)]
    loop.append(loop)
    closure()
    failing_step()


gc.disable()  # collections happen where this script says, not when allocation counts say
make()
a = torch.ones(16) + 1
gc.collect()
b = torch.ones(16) * 2
print("done", file=sys.stderr)
