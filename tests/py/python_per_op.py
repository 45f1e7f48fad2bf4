"""A loop of small ops (an LSTMCell unrolled 8 steps, then a BatchNorm1d, inside a model, Adam)
that counts the calls of each Python function of the memtrack agent made during 5 training
steps after 2 warm-up ones (sys.setprofile sees a Python function called from C too), and the
ops of those steps.

Prints one line: `calls {"ops": N, "observed": N, "on_del": N, "module_calls": N, "agent":
N}`: the calls of the agent's per-op entry (ops.observed), of its per-storage death callback
(ops._on_del), of the module tracker's per-call methods (modules.py: pre_forward,
post_forward, backward_starts, backward_ends; 4 per module call without the fast path), and
of all its functions. Then `paths {...}`: what the agent says took which path in those
steps (its native.paths(), the compiled observer's counts kept in C)."""

import json
import sys

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode



class Unrolled(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(16, 16)
        self.norm = nn.BatchNorm1d(16)  # (parameters and buffers, called once a step)

    def forward(self, x):
        h = x.new_zeros(4, 16)
        c = h
        for t in range(8):
            h, c = self.cell(x[t], (h, c))
        return self.norm(h)


torch.manual_seed(0)
model = Unrolled()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(8, 4, 16)
MODULE_CALLS = ("pre_forward", "post_forward", "backward_starts", "backward_ends")


def step():
    opt.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()


class Count(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        Count.n += 1
        return func(*args, **(kwargs or {}))


for _ in range(2):
    step()
with Count():  # (a mode of the program's own: its ops are those the agent would see)
    step()

calls = {"observed": 0, "on_del": 0, "module_calls": 0, "agent": 0}


def profile(frame, event, arg):
    if event != "call":
        return
    code = frame.f_code
    if "_memtrack_agent" not in code.co_filename:
        return
    calls["agent"] += 1
    if code.co_name in ("observed", "_on_del") and code.co_filename.endswith("ops.py"):
        calls[code.co_name.lstrip("_")] += 1
    elif code.co_name in MODULE_CALLS and code.co_filename.endswith("modules.py"):
        calls["module_calls"] += 1


agent = sys.modules["_memtrack_agent"].native
before = agent.paths()
sys.setprofile(profile)
for _ in range(5):
    step()
sys.setprofile(None)
after = agent.paths()
print("calls " + json.dumps({"ops": 5 * Count.n, **calls}))
print("paths " + json.dumps({k: v - before[k] if type(v) is int else v for k, v in after.items()}))
