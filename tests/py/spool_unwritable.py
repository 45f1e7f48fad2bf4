"""A process whose spool cannot be written (here: its folder is pointed somewhere that does
not exist before torch is imported; in life a full or read-only disk): the program runs to
the end unchanged, and `record` must not end with a silent 0."""

import os

os.environ["MEMTRACK_SPOOL"] = "/nonexistent/memtrack-spool"

import torch  # noqa: E402

print(float(torch.ones(8).sum()), flush=True)
