"""CUDA setup, once the program initialises CUDA itself: the device's facts, the allocator's
history (--snapshot, --cycles), the out-of-memory observer and the snapshots it and the exit
write.
"""

import os

from . import state
from .protocol import MSG_AGENT_ERROR, MSG_DEVICE, MSG_OOM, MSG_SNAPSHOT
from .transport import message


def available(torch):
    """memtrack's own probe: whatever torch warns here (a driver too old, CUDA init failing)
    is the program's to see if it asks, not a stray message at `import torch`."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(torch.cuda.is_available())
    except Exception:
        return False


def setup(torch):
    """Everything here would initialise CUDA, so it waits for the program to do that itself
    (torch.cuda._lazy_call): a torchrun worker must pick its device before any context exists,
    and a process that never uses CUDA must not get one. A failure here is reported, never
    raised (an exception in a queued call would surface in the program)."""
    try:
        torch.cuda._lazy_call(_on_cuda_init)
    except Exception as e:
        message({"t": MSG_AGENT_ERROR, "text": f"torch.cuda._lazy_call: {e!r}"})


def _snapshot_settings():
    """(path prefix or None, history entries) of --snapshot."""
    if state.snapshot is not None:
        return state.snapshot["prefix"], int(state.snapshot["entries"])
    prefix = os.environ.get("MEMTRACK_SNAPSHOT")
    return prefix, int(os.environ.get("MEMTRACK_MAX_SNAPSHOT_ENTRIES", "100000"))


def history_enabled(torch):
    """Whether the allocator records its history now (the program may have turned it on)."""
    try:
        return bool(torch._C._cuda_isHistoryEnabled())
    except Exception:
        return False


def _on_cuda_init():
    torch = state.torch
    if not state.active:
        return  # queued before a detach, run once the program initialised CUDA after it
    prefix, entries = _snapshot_settings()
    # --cycles wants allocation stacks for the tensors it finds, as
    # torch.utils.viz._cycles.observe_tensor_cycles turns the history on
    if prefix or os.environ.get("MEMTRACK_CYCLES"):
        try:
            if not history_enabled(torch):
                torch.cuda.memory._record_memory_history(max_entries=entries)
                # (a detach turns it off again, after the snapshot; the program's own stays)
                state.undo.append(lambda: torch.cuda.memory._record_memory_history(enabled=None))
        except Exception as e:
            message({"t": MSG_AGENT_ERROR, "text": f"_record_memory_history: {e!r}"})
    try:
        torch._C._cuda_attach_out_of_memory_observer(_on_oom)
    except Exception as e:
        message({"t": MSG_AGENT_ERROR, "text": f"OOM observer: {e!r}"})
    send_device(torch)


def _on_oom(device, alloc, device_allocated, device_free):
    if not state.active:
        return  # torch has no way to take an OOM observer off: after a detach it does nothing
    try:
        msg = {
            "t": MSG_OOM,
            "device": device,
            "alloc": alloc,
            "device_allocated": device_allocated,
            "device_free": device_free,
        }
        try:
            # the allocator's counters as they stood when it gave up (the observer runs
            # without the allocator's lock held, as _dump_snapshot below needs too)
            msg["memory_stats"] = dict(state.torch.cuda.memory_stats(device))
        except Exception as e:
            msg["memory_stats_error"] = repr(e)
        message(msg)
        write_snapshot("oom")
    except Exception:
        pass


def send_device(torch):
    try:
        i = torch._C._cuda_getDevice()
        p = torch.cuda.get_device_properties(i)
        msg = {"t": MSG_DEVICE, "name": p.name, "total_bytes": p.total_memory, "index": i}
        uuid = getattr(p, "uuid", None)
        if uuid is not None:
            u = str(uuid)
            msg["uuid"] = u if u.startswith(("GPU-", "MIG-")) else "GPU-" + u
        message(msg)
    except Exception:
        pass


def snapshot_path(prefix, reason):
    """PREFIX.rank<R>.REASON.pickle (pid<PID> without a rank)."""
    rank = state.int_env("RANK")
    tag = f".rank{rank}" if rank is not None else f".pid{os.getpid()}"
    return f"{prefix}{tag}.{reason}.pickle"


def write_snapshot(reason):
    prefix, _ = _snapshot_settings()
    if not prefix:
        return
    torch = state.torch
    if not torch.cuda.is_initialized():
        return
    path = snapshot_path(prefix, reason)
    torch.cuda.memory._dump_snapshot(path)
    message({"t": MSG_SNAPSHOT, "reason": reason, "path": path})


def stats_reader(torch):
    """One allocator call per op (MemoryTracker makes three, each building the whole dict)."""
    memstats = torch._C._cuda_memoryStats
    getdev = torch._C._cuda_getDevice
    cuda_mod = torch.cuda
    zero = (0, 0, 0)

    def read():
        if not cuda_mod._initialized:
            return zero
        s = memstats(getdev())
        return (
            s["allocated_bytes"]["all"]["current"],
            s["active_bytes"]["all"]["current"],
            s["reserved_bytes"]["all"]["current"],
        )

    return read
