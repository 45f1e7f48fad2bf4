"""Builds (JIT, torch.utils.cpp_extension.load) and loads observer.cpp; the build directory
lives under ~/.cache (or $MEMTRACK_OBSERVER_BUILD), never in the repository."""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get(
    "MEMTRACK_OBSERVER_BUILD", os.path.expanduser("~/.cache/memtrack/observer_probe_build")
)


def load(verbose=False):
    """(module, seconds load() took: a compile when the cache is cold, a dlopen when warm)."""
    from torch.utils.cpp_extension import load as jit_load

    os.makedirs(BUILD, exist_ok=True)
    # `pip install ninja` puts the binary next to the interpreter, which need not be on PATH
    # when the venv is not activated; load() looks for it on PATH only.
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    t = time.perf_counter()
    mod = jit_load(
        name="memtrack_observer_probe",
        sources=[os.path.join(HERE, "observer.cpp")],
        build_directory=BUILD,
        extra_cflags=["-O2"],
        verbose=verbose,
    )
    return mod, time.perf_counter() - t
