"""DTensor on a one-process gloo group: a Linear's parameters distributed (replicated) over a
one-device CPU mesh, forward, backward and an SGD step. Exits 0 alone; under `memtrack
record` it must too."""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import Replicate, distribute_module, distribute_tensor
from torch.distributed.device_mesh import DeviceMesh

store_file = tempfile.NamedTemporaryFile(delete=False)
store_file.close()
dist.init_process_group(
    "gloo", store=dist.FileStore(store_file.name, 1), rank=0, world_size=1
)
try:
    mesh = DeviceMesh("cpu", [0])
    torch.manual_seed(0)
    lin = distribute_module(nn.Linear(16, 8), mesh)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for _ in range(2):
        x = distribute_tensor(torch.randn(4, 16), mesh, [Replicate()])
        loss = lin(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("ok", float(loss.full_tensor()))
finally:
    dist.destroy_process_group()
    os.unlink(store_file.name)
