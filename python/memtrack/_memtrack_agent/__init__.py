"""memtrack's recording agent. `memtrack record` writes this package (embedded in the binary)
into a private folder (the wheel also installs it as memtrack._memtrack_agent, for
memtrack.record); sitecustomize.py calls install(), which arms a one-shot import hook;
when the program imports torch, activate.activate() connects to the collector and starts a
TorchDispatchMode (or the compiled observer) plus global module and optimizer hooks.

Modules, each owning one part (imports go one way, down this list):
  protocol   the constants shared with the collector (src/record/protocol.rs checks them)
  versions   the torch versions the agent supports
  state      whether this process records, its torch and backend, its environment
  transport  socket, spool, JSON messages, the flusher thread
  importhook code run right after a module is imported
  dynamo     marking the agent's code never to be traced by torch.compile
  names      module and optimizer names announced once
  native     the compiled observer (observer.cpp, --observer compiled|auto): built once, loaded,
             started in place of the dispatch mode
  ops        the dispatch mode, or the compiled observer's entry: per-op samples and storage
             accounting (the hot path)
  modules    module hooks: names, forward/backward, activation checkpointing, iterations
  optim      optimizer step hooks
  compiled   torch.compile: compiled graph calls, module.compile(), dynamo's counters
  cuda       device facts, allocator history, OOM observer, snapshots
  cycles     --cycles: reference cycles that hold tensors
  process    exit, signals, exceptions, fork
  activate   starting all of the above when torch is imported
  inprocess  memtrack.record: starting it inside a running program, and taking it all off
  attach     memtrack attach PID: inprocess started by a pending call, and taken off again

The wire format is documented in docs/record.md and decoded by src/record/replay/.
"""

import os
import sys

from . import state, transport
from .importhook import AfterImport
from .protocol import FRAME_JSON, MSG_NO_TORCH, MSG_TORCH_NOT_IMPORTED


def install():
    """Arm the import hook (from sitecustomize); torch itself is imported by the program."""
    if "torch" in sys.modules:
        _activate(sys.modules["torch"])
        return
    sys.meta_path.insert(0, AfterImport("torch", _activate))
    import atexit

    atexit.register(_exit_without_torch)


def _activate(torch):
    from .activate import activate

    activate(torch)


def _exit_without_torch():
    """At exit of a process that never started the agent: tell the collector why."""
    if state.started or state.is_launcher() or os.environ.get("MEMTRACK_DISABLE"):
        return
    try:
        import importlib.util

        has_torch = importlib.util.find_spec("torch") is not None
    except Exception:
        has_torch = False
    try:
        if not transport.open_socket():
            return
        msg = {
            "t": MSG_NO_TORCH if not has_torch else MSG_TORCH_NOT_IMPORTED,
            "pid": os.getpid(),
            "python": sys.executable,
            "argv": list(getattr(sys, "orig_argv", sys.argv)),
        }
        transport.send_frame(FRAME_JSON, transport.encode_json(msg))
        transport.sock.close()
    except Exception:
        pass
