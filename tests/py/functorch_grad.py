"""torch.func.grad and vmap over functional_call: functorch's wrapper tensors flow through
the module hooks and the dispatch mode. Exits 0 alone; under `memtrack record` it must too."""

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
params = {k: v.detach() for k, v in net.named_parameters()}
x = torch.randn(32, 8)
y = torch.randn(32, 1)


def loss(p, xb, yb):
    return ((functional_call(net, p, (xb,)) - yb) ** 2).mean()


g = grad(loss)(params, x, y)
per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x.unsqueeze(1), y.unsqueeze(1))
batched = vmap(lambda xb: functional_call(net, params, (xb,)))(x)
assert per_sample["0.weight"].shape == (32, 16, 8)
print("ok", float(g["0.weight"].sum() + batched.sum()))
