"""A DataLoader with num_workers=2 (forked workers) feeding a small MLP, SGD with momentum."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 64), torch.randint(0, 4, (256,)))
loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=2,
                    generator=torch.Generator().manual_seed(0))
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
print(f"param_bytes={sum(p.numel() * p.element_size() for p in model.parameters())}")
for step, (x, y) in enumerate(loader):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
