"""A small MLP trained through torch.compile (Inductor), as `record` must leave it: compiled.

    compiled_mlp.py COUNTERS.json [STEPS] [function|method]

(torch.compile(model), the default, or model.compile())

writes dynamo's own counters (frames compiled, graph breaks) to COUNTERS.json at the end.
"""

import json
import sys

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if sys.argv[3:] == ["method"]:
        model.compile()
        compiled = model
    else:
        compiled = torch.compile(model)
    x = torch.randn(32, 64)
    for _ in range(steps):
        opt.zero_grad()
        compiled(x).sum().backward()
        opt.step()
    from torch._dynamo.utils import counters

    with open(out, "w") as f:
        json.dump(
            {
                "frames": dict(counters["frames"]),
                "graph_breaks": sum(counters["graph_break"].values()),
            },
            f,
        )


if __name__ == "__main__":
    main()
