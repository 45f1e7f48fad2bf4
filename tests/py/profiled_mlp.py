"""Three training steps of a small MLP under torch.profiler (profile_memory, with_stack),
exported as a Chrome trace to OUT (tests/agent_frames.rs profiles it alone and under
`memtrack record`).

    python profiled_mlp.py OUT
"""

import sys

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
x = torch.randn(32, 64)
activities = [torch.profiler.ProfilerActivity.CPU]
with torch.profiler.profile(
    activities=activities, profile_memory=True, record_shapes=True, with_stack=True
) as prof:
    for _ in range(3):
        model(x).sum().backward()
prof.export_chrome_trace(sys.argv[1])
