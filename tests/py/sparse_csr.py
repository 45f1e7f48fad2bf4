"""A sparse CSR tensor (and a COO one) flowing through ops: matmul, add, to_dense, coalesce,
values/indices. Exits 0 alone; under `memtrack record` it must too."""

import torch
from torch import nn

torch.manual_seed(0)
dense = torch.randn(64, 64) * (torch.rand(64, 64) > 0.9)
csr = dense.to_sparse_csr()
coo = dense.to_sparse()
lin = nn.Linear(64, 8)
x = torch.randn(64, 64)
for _ in range(2):
    y = csr @ x  # sparse x dense
    z = torch.sparse.mm(coo, x)
    w = (coo + coo).coalesce()
    v = csr.to_dense() + w.to_dense()
    out = lin(y + z + v)
    s = csr * 2.0
    c = s.crow_indices().sum() + s.col_indices().sum() + s.values().sum()
    bsr = dense.to_sparse_bsr((8, 8))
    out = out + bsr.to_dense()[:, :8]
print("ok", float((out.sum() + c).detach()))
