# `memtrack estimate`'s test program: an MLP on CUDA (dims from argv), one Adam step, gradients
# kept; a value read (float) that the estimate must report; a last op after the step.
import sys

import torch

dims = [int(d) for d in sys.argv[1].split(",")]
layers = []
for a, b in zip(dims, dims[1:]):
    layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers[:-1]).cuda()
opt = torch.optim.Adam(model.parameters())
x = torch.randn(8, dims[0], device="cuda")
loss = model(x).square().mean()
loss.backward()
opt.step()
del loss
print("sum", float(x.sum()))
x.add_(1)
