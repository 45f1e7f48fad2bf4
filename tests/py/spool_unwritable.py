"""A process whose spool cannot be written (here: the journal folder is removed before torch is
imported, so no spool file can be made in it; in life a full or read-only disk): the program
runs to the end unchanged, and `record` must not end with a silent 0."""

import os
import shutil

shutil.rmtree(os.environ["MEMTRACK_SPOOL"])

import torch  # noqa: E402

print(float(torch.ones(8).sum()), flush=True)
