"""Two training steps of a model under torch.autocast(DEVICE, bfloat16).

    python tests/py/autocast_train.py DEVICE mlp|transformer

mlp: Linear-ReLU layers and cross_entropy (autocast's CPU and CUDA policies agree on every op
it runs); transformer: a TransformerEncoderLayer (layer_norm, attention, dropout) and a mean
loss. Prints the output's and the loss's dtypes."""

import sys

import torch
from torch import nn

dev, model_name = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if model_name == "mlp":
    model = nn.Sequential(
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 128)
    ).to(dev)
    x = torch.randn(512, 256, device=dev)
    y = torch.randint(0, 128, (512,), device=dev)
else:
    model = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).to(dev)
    x = torch.randn(8, 128, 256, device=dev)
    y = None
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    with torch.autocast(dev, dtype=torch.bfloat16):
        out = model(x)
        loss = nn.functional.cross_entropy(out, y) if y is not None else out.float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(out.dtype, loss.dtype)
