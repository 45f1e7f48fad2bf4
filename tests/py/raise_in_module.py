"""A training loop whose fourth batch has the wrong width: the first Linear's addmm raises
inside `Sequential.0`'s forward, as shape bugs do. `summary` must name the exception and
where it came."""

import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
for i in range(5):
    x = torch.randn(4, 8 if i < 3 else 5)
    model(x).sum().backward()
