"""A program whose `import torch` takes 2 s longer, its main thread running bytecodes all
along, for `memtrack attach` (tests/attach.rs): torch's own __init__ imports torch.optim
after it has loaded libtorch; that import writes READY_FILE and sleeps in short steps
before it runs. Then steps of a small model for SECONDS, printing `ok` at the end.

    python attach_during_import.py READY_FILE SECONDS
"""

import importlib.abc
import importlib.machinery
import sys
import time

ready, seconds = sys.argv[1], float(sys.argv[2])


class SlowOptim(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.optim":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            open(ready, "w").close()
            for _ in range(40):
                time.sleep(0.05)
            run(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, SlowOptim())

import torch  # noqa: E402
from torch import nn  # noqa: E402

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
end = time.monotonic() + seconds
while time.monotonic() < end:
    model(torch.randn(16, 32)).sum().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.01)
print("ok")
