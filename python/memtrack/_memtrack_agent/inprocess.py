"""Recording inside the program (`memtrack.record`, docs/python.md): no collector process and
no socket. The records go to a spool in a journal folder, as under `memtrack record`, and the
Python package has `memtrack record --recover` turn it into the same stats file when the block
ends. Started with torch already imported (tensors made before are counted from when the agent
first sees them); stopped by taking off everything the parts installed (state.undo), so the
program runs unobserved after the block. One recording per fresh import of this package: the
caller imports the agent anew for each (its module state is the recording's).
"""

import os
import sys
import traceback

from . import activate, cuda, optim, process, state, transport, versions
from .protocol import MSG_EXCEPTION


def start(torch, spool, backend="auto", observer="auto"):
    """Record this process from now on into the journal folder `spool`, its ops seen by
    `observer` (activate.choose_observer); raises (before installing anything) where it
    cannot."""
    if state.started:
        raise RuntimeError("this agent has recorded already: import it anew")
    version = getattr(torch, "__version__", "?")
    why = versions.unsupported(version, os.environ.get("MEMTRACK_ANY_TORCH"))
    if why is not None:
        raise RuntimeError(why)
    if backend not in ("auto", "cuda", "cpu"):
        raise ValueError(f"backend {backend!r}: expected 'auto', 'cuda' or 'cpu'")
    if observer not in ("auto", "python", "compiled"):
        raise ValueError(f"observer {observer!r}: expected 'auto', 'python' or 'compiled'")
    if backend == "auto":
        backend = "cuda" if cuda.available(torch) else "cpu"
    elif backend == "cuda" and not cuda.available(torch):
        raise RuntimeError(
            "backend 'cuda', but torch.cuda.is_available() is False in this process "
            f"(torch {getattr(torch, '__version__', '?')}); use backend='cpu' or 'auto'"
        )
    transport.open_spool(spool)
    state.torch = torch
    state.backend = backend
    # a DataLoader worker forked inside the block must not write into this spool
    os.register_at_fork(after_in_child=process.after_fork_in_child)
    try:
        activate.begin(torch, backend, observer)
        # optimizers made before the block: their step ends an iteration, as under `record`
        seen = optim.hooks.optimizers
        Optimizer = torch.optim.Optimizer
        import gc

        for o in gc.get_objects():
            if issubclass(type(o), Optimizer):  # type(): no attribute of o read
                seen.add(o)
        if backend == "cuda":
            cuda.setup(torch)
    except BaseException:
        stop(None)
        raise


def stop(exc, how=None):
    """End the recording: how the block ended (`exc`, the exception leaving it, or None;
    `how` names another ending, as `memtrack attach`'s "detached"), the goodbye, then every hook and the dispatch mode off, the spool closed. Never raises."""
    try:
        if exc is not None and state.active:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            oom = type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError)
            transport.message(
                {"t": MSG_EXCEPTION, "type": type(exc).__name__, "text": text, "oom": oom}
            )
        process.finish(how or ("exit" if exc is None else "exception"))
    except Exception as e:
        sys.stderr.write(f"memtrack: ending the recording: {e!r}\n")
    state.active = False
    for undo in reversed(state.undo):
        try:
            undo()
        except Exception as e:
            sys.stderr.write(f"memtrack: taking the agent off: {e!r}\n")
    state.undo.clear()
    transport.close_spool()
