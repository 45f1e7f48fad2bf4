"""CPU autocast to bfloat16 on a small MLP + conv model, SGD, a few steps."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print(f"param_bytes={sum(p.numel() * p.element_size() for p in model.parameters())}")
x = torch.randn(64, 256)
y = torch.randint(0, 10, (64,))
for step in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        assert out.dtype == torch.bfloat16
        loss = nn.functional.cross_entropy(out.float(), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
