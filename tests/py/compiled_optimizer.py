"""A compiled optimizer step, as PyTorch's "compiled optimizer" recipe writes it:

    @torch.compile(fullgraph=False)
    def opt_step():
        opt.step()

    compiled_optimizer.py COUNTERS.json [STEPS]

The optimizer's global step hooks (memtrack's) run inside that function while dynamo traces
it. Writes dynamo's counters (frames, graph breaks and their reasons) and the losses to
COUNTERS.json, so a recorded run can be compared with a plain one.
"""

import json
import sys

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    # a tensor learning rate: changing it does not recompile (the recipe's advice)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))

    @torch.compile(fullgraph=False)
    def opt_step():
        opt.step()

    x = torch.randn(32, 64)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt_step()
        losses.append(loss.item())
    from torch._dynamo.utils import counters

    with open(out, "w") as f:
        json.dump(
            {
                "frames": dict(counters["frames"]),
                "graph_breaks": sum(counters["graph_break"].values()),
                "graph_break_reasons": [r.split("\n")[0] for r in counters["graph_break"]],
                "losses": losses,
            },
            f,
        )


if __name__ == "__main__":
    main()
