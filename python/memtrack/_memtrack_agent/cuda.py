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


def _on_cuda_init():
    torch = state.torch
    # --cycles wants allocation stacks for the tensors it finds, as
    # torch.utils.viz._cycles.observe_tensor_cycles turns the history on
    if os.environ.get("MEMTRACK_SNAPSHOT") or os.environ.get("MEMTRACK_CYCLES"):
        try:
            n = int(os.environ.get("MEMTRACK_MAX_SNAPSHOT_ENTRIES", "100000"))
            torch.cuda.memory._record_memory_history(max_entries=n)
        except Exception as e:
            message({"t": MSG_AGENT_ERROR, "text": f"_record_memory_history: {e!r}"})
    try:
        torch._C._cuda_attach_out_of_memory_observer(_on_oom)
    except Exception as e:
        message({"t": MSG_AGENT_ERROR, "text": f"OOM observer: {e!r}"})
    send_device(torch)


def _on_oom(device, alloc, device_allocated, device_free):
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


def write_snapshot(reason):
    prefix = os.environ.get("MEMTRACK_SNAPSHOT")
    if not prefix:
        return
    torch = state.torch
    if not torch.cuda.is_initialized():
        return
    rank = state.int_env("RANK")
    tag = f".rank{rank}" if rank is not None else f".pid{os.getpid()}"
    path = f"{prefix}{tag}.{reason}.pickle"
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
