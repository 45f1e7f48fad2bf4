"""A packed-sequence LSTM trained under CPU autocast (bfloat16) with Adam. Exits 0 alone;
under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)
lstm = nn.LSTM(16, 32, batch_first=True)
head = nn.Linear(32, 4)
opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()))
seqs = [torch.randn(n, 16) for n in (7, 5, 3)]
packed = nn.utils.rnn.pack_sequence(seqs)
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, (h, c) = lstm(packed)
        loss = head(h[-1]).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
