"""Inference through two top-level modules, `enc(emb(ids), src_key_padding_mask=pad)`, under
`torch.no_grad`, five batches: one iteration per batch (the pipeline's two calls are one
pass), every module of both in the tables, and nothing said to be retained (each batch's
output is freed when the next one is assigned)."""

import torch

BATCHES = 5
torch.manual_seed(0)
emb = torch.nn.Embedding(100, 32)
layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
enc.eval()
with torch.no_grad():
    for batch in range(BATCHES):
        ids = torch.randint(0, 100, (4, 12))
        pad = torch.zeros(4, 12, dtype=torch.bool)
        pad[:, 9:] = True
        out = enc(emb(ids), src_key_padding_mask=pad)
print("batches", BATCHES, "width", out.shape[-1])
