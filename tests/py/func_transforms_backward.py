"""The backward of a module's forward run under torch.func's transforms: vmap of
functional_call with the backward outside it, grad, jacrev, vmap of grad (per-sample
gradients), vmap inside grad, and a vmapped ensemble (stack_module_state) trained by an
optimizer. Every backward op of the MLP's layers (mm, threshold_backward) belongs to a
module, as in an ordinary backward.

    python tests/py/func_transforms_backward.py

Prints `cases N threshold_backward M` on stderr: the transforms run, and how many backward
passes run relu's backward (one threshold_backward op each)."""

import copy
import sys

import torch
from torch import nn
from torch.func import functional_call, grad, jacrev, stack_module_state, vmap


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


torch.manual_seed(0)
net = MLP()
params = dict(net.named_parameters())
detached = {k: v.detach() for k, v in params.items()}
x = torch.randn(32, 8)
y = torch.randn(32, 1)


def call(p, xb):
    return functional_call(net, p, (xb,))


def loss(p, xb, yb):
    return ((call(p, xb) - yb) ** 2).mean()


cases = passes = 0

# vmap of the forward, backward outside it
vmap(lambda xb: call(params, xb))(x).sum().backward()
cases, passes = cases + 1, passes + 1

# grad of the loss
grad(loss)(detached, x, y)
cases, passes = cases + 1, passes + 1

# jacrev of the outputs by the parameters (a vmapped backward: one pass)
jacrev(call)(detached, x[:4])
cases, passes = cases + 1, passes + 1

# per-sample gradients: vmap of grad
vmap(grad(loss), in_dims=(None, 0, 0))(detached, x.unsqueeze(1), y.unsqueeze(1))
cases, passes = cases + 1, passes + 1

# vmap inside grad
grad(lambda p: vmap(lambda xb: call(p, xb))(x).sum())(detached)
cases, passes = cases + 1, passes + 1

# an ensemble of 3 copies, vmapped over their stacked parameters, trained by SGD
members = [MLP() for _ in range(3)]
stacked, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")
opt = torch.optim.SGD(list(stacked.values()), lr=0.01)
for _ in range(2):
    out = vmap(lambda p, b, xb: functional_call(base, (p, b), (xb,)), in_dims=(0, 0, None))(
        stacked, buffers, x
    )
    ((out - y) ** 2).mean().backward()
    opt.step()
    opt.zero_grad()
    cases, passes = cases + 1, passes + 1

print(f"cases {cases} threshold_backward {passes}", file=sys.stderr)
