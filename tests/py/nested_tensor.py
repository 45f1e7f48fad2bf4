"""Nested (jagged and strided) tensors through a module, forward and backward. Exits 0
alone; under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)
lin = nn.Linear(16, 4)
for layout in (torch.strided, torch.jagged):
    nt = torch.nested.nested_tensor(
        [torch.randn(3, 16), torch.randn(5, 16)], layout=layout, requires_grad=True
    )
    out = lin(nt)
    total = sum(t.sum() for t in out.unbind())
    total.backward()
    assert nt.grad is not None
print("ok")
