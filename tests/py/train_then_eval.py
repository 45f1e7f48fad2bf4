"""Training steps, then inference calls, in one program: a small detection-like model
(a conv backbone, box and class heads) trained a few steps by SGD, then evaluated in eval
mode under no_grad on larger batches; with --ema, an EMA copy of it
(torch.optim.swa_utils.AveragedModel) updated after each step and evaluated at the end.

    python tests/py/train_then_eval.py --steps 4 --evals 2 [--ema]

Prints `steps N evals M` on stderr."""

import argparse
import sys

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--evals", type=int, default=2)
p.add_argument("--ema", action="store_true")
args = p.parse_args()


class Detector(nn.Module):
    def __init__(self, classes=5, anchors=3):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        self.boxes = nn.Conv2d(32, anchors * 4, 1)
        self.scores = nn.Conv2d(32, anchors * classes, 1)

    def forward(self, x):
        f = self.backbone(x)
        return self.boxes(f), self.scores(f)


torch.manual_seed(0)
model = Detector()
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9)) if args.ema else None
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for _ in range(args.steps):
    x = torch.randn(4, 3, 32, 32)
    boxes, scores = model(x)
    loss = boxes.pow(2).mean() + scores.logsumexp(1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if ema is not None:
        ema.update_parameters(model)

evaluated = ema if ema is not None else model
evaluated.eval()
with torch.no_grad():
    for _ in range(args.evals):
        # a larger batch than training's: the eval call allocates more activations
        boxes, scores = evaluated(torch.randn(16, 3, 32, 32))
        keep = scores.sigmoid().amax(1) > 0.5
print(f"steps {args.steps} evals {args.evals}", file=sys.stderr)
