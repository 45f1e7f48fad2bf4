"""torch.func.grad over functional_call(net, params, x), as the issue's program: a few
gradient steps updating the parameters by hand (no optimizer), then vmap'd forward-only
calls. Every call of the module through functional_call is a top-level forward.

    python tests/py/func_functional_call.py --grad-steps 3 --forward-only 2

Prints `grad_steps N forward_only M`."""

import argparse

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

p = argparse.ArgumentParser()
p.add_argument("--grad-steps", type=int, default=3)
p.add_argument("--forward-only", type=int, default=2)
args = p.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


torch.manual_seed(0)
net = Net()
params = {k: v.detach() for k, v in net.named_parameters()}
x = torch.randn(32, 8)
y = torch.randn(32, 1)


def loss(p, xb, yb):
    return ((functional_call(net, p, (xb,)) - yb) ** 2).mean()


for _ in range(args.grad_steps):
    g = grad(loss)(params, x, y)
    params = {k: v - 0.01 * g[k] for k, v in params.items()}
for _ in range(args.forward_only):
    out = vmap(lambda xb: functional_call(net, params, (xb,)))(x)
print(f"grad_steps {args.grad_steps} forward_only {args.forward_only}")
