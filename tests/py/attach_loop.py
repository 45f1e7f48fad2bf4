"""A training loop for `memtrack attach` (tests/attach.rs): STEPS steps of a small MLP,
about PACE seconds each, printing the loss every 25 steps (stdout is the same with or
without an attach); with HOOK_SLEEP, a hook inside each backward pass sleeps that long, so
most of the time is spent inside backward. It writes READY_FILE after the first steps, then
at its end a JSON of facts to FACTS_FILE: each step's start time and duration, and what an
attach could have left behind (dispatch modes, global module hooks, patched functions,
import hooks, the agent's modules and threads), as at the start and at the end. A rank of
torchrun (RANK set) adds `.rankN` to both file names.

    python attach_loop.py STEPS PACE READY_FILE FACTS_FILE [EXIT_CODE [HOOK_SLEEP]]
"""

import json
import os
import sys
import threading
import time

import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

steps, pace, ready, facts_path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
if "RANK" in os.environ:  # a rank of torchrun: files of its own
    ready += ".rank" + os.environ["RANK"]
    facts_path += ".rank" + os.environ["RANK"]
code = int(sys.argv[5]) if len(sys.argv) > 5 else 0
hook_sleep = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128))
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        h = torch.relu(self.encoder(x))
        if hook_sleep and h.requires_grad:
            h.register_hook(lambda g: time.sleep(hook_sleep))
        return self.head(h)


def leftovers():
    m = nn.modules.module
    return {
        "modes": len(_get_current_dispatch_mode_stack()),
        "global_hooks": [
            len(getattr(m, n, {}))
            for n in dir(m)
            if n.startswith("_global_") and isinstance(getattr(m, n), dict)
        ],
        "patched": [
            repr(getattr(o, n, None))
            for o, n in (
                (nn.Module, "__call__"),
                (nn.Module, "compile"),
                (torch.optim.Optimizer, "__init__"),
                (torch.optim.Optimizer, "step"),
                (torch.UntypedStorage, "resize_"),
                (torch.Tensor, "as_subclass"),
            )
        ],
        "meta_path": [type(f).__name__ for f in sys.meta_path],
        "agent_modules": sorted(k for k in sys.modules if "memtrack" in k),
        "threads": sorted(t.name for t in threading.enumerate()),
        "excepthook": repr(sys.excepthook),
    }


torch.set_num_threads(1)
torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(32, 64)
y = torch.randint(0, 10, (32,))
before = leftovers()
starts, durations = [], []
for step in range(steps):
    t0 = time.time()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    durations.append(time.time() - t0)
    starts.append(t0)
    if step % 25 == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    if step == 5:
        open(ready, "w").close()
    time.sleep(pace)
time.sleep(0.2)  # a detach's thread ends
after = leftovers()
with open(facts_path, "w") as f:
    json.dump({"starts": starts, "durations": durations, "before": before, "after": after}, f)
print("done", flush=True)
sys.exit(code)
