"""What this process is to the agent: whether it records (and ever did), the torch module and
the backend chosen, and what the environment says about it (rank, torchrun's launcher).

Written by activate.py and process.py, read everywhere; nothing here runs per op.
"""

import os
import sys

active = False  # recording now
started = False  # the agent ran in this process (even if it has stopped since)
torch = None
# `memtrack attach`: when it started the agent and what was held then (attach.py), for hello
attached = None
backend = "cpu"
# `memtrack attach --snapshot`: {"prefix": path prefix, "entries": history length}; under
# `record` they come from MEMTRACK_SNAPSHOT and MEMTRACK_MAX_SNAPSHOT_ENTRIES
snapshot = None
# What each part installed, as functions that take it off again, in the order installed. Only
# the in-process recording (inprocess.py) runs them, backwards, when its block ends; under
# `memtrack record` the agent stays until the process ends.
undo = []


_agent_dir = os.path.dirname(os.path.abspath(__file__))
_torch_dir = f"{os.sep}torch{os.sep}"


def program_file(name):
    """Whether a frame's file is the program's (or its libraries'): not torch's, the agent's or
    Python's frozen modules. Where the program asked or raised is its innermost such frame."""
    return not (
        name.startswith(_agent_dir) or _torch_dir in name or name.startswith("<frozen")
    )


def int_env(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def is_launcher():
    """torchrun's own process imports torch too; only its workers are recorded."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    for i, a in enumerate(argv):
        if a == "-m" and i + 1 < len(argv) and argv[i + 1] in (
            "torch.distributed.run",
            "torch.distributed.launch",
        ):
            return True
    return bool(argv) and os.path.basename(sys.argv[0] or "") == "torchrun"
