"""`memtrack estimate`: the program runs as if on CUDA, with meta tensors standing for the GPU's
(docs/estimate.md). Meta tensors have shapes, dtypes and strides but no memory, so a model of
any size runs on a small machine; ops.py accounts their storages as device 0 (CUDA's 512-byte
rounding), and the collector replays those allocations through the caching-allocator model
for the reserved series.

The parts, each in its module:
- fake_memory: which meta storages are the device's, cuBLAS's workspaces, and the live
  allocator model that answers the program's questions about memory;
- fake_mode: the function mode (device="cuda", .cuda(), .to("cuda") make meta tensors; reads
  of values; backward run with the mode on);
- fake_values: the values the host can know (shadows), what an unknown read gets, and the
  facts said about reads; fake_kernels: CUDA's kernels where they differ from the meta
  device's, and sizes for data-dependent ops; fake_files: checkpoints never written;
  fake_autocast: autocast's CUDA policy.
Here: `torch.cuda`'s functions answer as the device would, and everything is installed.
"""

import os
import sys
import types

from . import (
    fake_autocast,
    fake_dist,
    fake_files,
    fake_kernels,
    fake_memory,
    fake_mode,
    fake_values,
    ops,
    state,
    transport,
)
from .protocol import MSG_DEVICE


def _wrap_dispatch(torch, mode_class):
    """Around each op the dispatch mode sees: cuBLAS's workspaces where CUDA makes them
    (before the op's sample), and the op's outputs' values where its inputs' are known."""
    dispatch = mode_class.__torch_dispatch__
    gtid = torch._C._current_graph_task_id

    copy_, to_copy = torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is copy_ or func is to_copy:
            out = _copy_to_host(torch, func, args, kwargs or {})
            if out is not None:
                return out
        if func.namespace == "aten":
            try:
                fake_memory.count_workspace(func, gtid() != -1)
            except Exception as e:
                transport.internal_error(e)
        else:
            fake_dist.saw_collective(func, args)
        out = dispatch(self, func, types, args, kwargs)
        try:
            fake_values.propagate(func, args, kwargs or {}, out)
        except Exception as e:
            transport.internal_error(e)
        return out

    mode_class.__torch_dispatch__ = __torch_dispatch__


def _copy_to_host(torch, func, args, kwargs):
    """A copy of a device tensor to a real CPU tensor made inside torch (C++ reading a
    device tensor: DDP's bucket order, a size): its values where known, else zeros, said as
    a read. None for any other copy."""
    if func is torch.ops.aten.copy_.default:
        dst, src = args[0], args[1]
        if dst.is_meta:
            return None
    else:
        dst, src = None, args[0]
        if getattr(kwargs.get("device"), "type", kwargs.get("device")) != "cpu":
            return None
    if not src.is_meta or fake_memory.uncounted_kind(src) is not None:
        return None
    v = fake_values.value(src)
    if v is None:
        fake_values.note_read("copied to the CPU (inside torch)")
        v = fake_values.placeholder(src)
    with torch._C.DisableTorchFunction():
        if dst is not None:
            return dst.copy_(v)
        return v.to(dtype=kwargs.get("dtype") or src.dtype, copy=True)


class _Event:
    """torch.cuda.Event: nothing to time on a device that does not run."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end_event):
        # no time passes on a device that does not run: an unknown, as a value read is
        return fake_values.unknown(0.0, "torch.cuda.Event.elapsed_time()")


class _Stream:
    """torch.cuda.Stream: one stream (streams other than the default are not modelled)."""

    stream_id, device_index, device_type = 0, 0, 1  # the default stream of CUDA device 0

    def __init__(self, *args, **kwargs):
        self.device = types.SimpleNamespace(type="cuda", index=0)
        self.cuda_stream = 0

    def synchronize(self):
        pass

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event or _Event()

    def query(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _free(f, total):
    return (max(0, f["limit"] - f["reserved"]), total)


def _memory_functions(torch, total, usable):
    """The allocator's figures from the live model (fake_memory.figures)."""

    def figures():
        f = fake_memory.figures()
        if f is None:  # the model out of reach (said as an agent error): the live bytes
            n = fake_memory.live_bytes()
            f = {"allocated": n, "reserved": n, "peak_allocated": n, "peak_reserved": n}
            f.update(retries=0, ooms=0, limit=usable)
        return f

    def stats(device=None):
        f = figures()
        s = {}
        for name, now, peak in (
            ("allocated_bytes", "allocated", "peak_allocated"),
            ("active_bytes", "allocated", "peak_allocated"),
            ("requested_bytes", "allocated", "peak_allocated"),
            ("reserved_bytes", "reserved", "peak_reserved"),
        ):
            s[f"{name}.all.current"] = f[now]
            s[f"{name}.all.peak"] = f[peak]
        s["num_alloc_retries"] = f["retries"]
        s["num_ooms"] = f["ooms"]
        return s

    def summary(device=None, abbreviated=False):
        f = figures()
        mib = 1 << 20
        return (
            "memtrack estimate: the caching allocator's model, as if on "
            f"{torch.cuda.get_device_name()}\n"
            f"  allocated {f['allocated'] / mib:.1f} MiB (peak {f['peak_allocated'] / mib:.1f} MiB)\n"
            f"  reserved  {f['reserved'] / mib:.1f} MiB (peak {f['peak_reserved'] / mib:.1f} MiB)\n"
        )

    def reset(device=None):
        fake_memory.reset_peaks()

    return {
        "memory_allocated": lambda device=None: figures()["allocated"],
        "max_memory_allocated": lambda device=None: figures()["peak_allocated"],
        "memory_reserved": lambda device=None: figures()["reserved"],
        "max_memory_reserved": lambda device=None: figures()["peak_reserved"],
        "memory_cached": lambda device=None: figures()["reserved"],
        "max_memory_cached": lambda device=None: figures()["peak_reserved"],
        # free: what the allocator may still take (less NCCL's allowance once a group talks)
        "mem_get_info": lambda device=None: _free(figures(), total),
        "memory_stats": stats,
        "memory_summary": summary,
        "reset_peak_memory_stats": reset,
        "reset_max_memory_allocated": reset,
        "reset_max_memory_cached": reset,
    }


def _device_count():
    """1, or the devices `--gpus-per-node` gives a program of one process (one that starts a
    process per device itself); a distributed estimate answers LOCAL_WORLD_SIZE (fake_dist)."""
    n = os.environ.get("MEMTRACK_ESTIMATE_DEVICES", "")
    return int(n) if n.isdigit() and int(n) > 0 else 1


def _patch_cuda(torch, name, total, capability, usable):
    cuda = torch.cuda
    props = types.SimpleNamespace(
        name=name,
        total_memory=total,
        major=capability[0],
        minor=capability[1],
        multi_processor_count=132,
        is_integrated=False,
        is_multi_gpu_board=False,
    )
    default_stream = _Stream()
    fns = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "device_count": _device_count,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_device_name": lambda device=None: name,
        "get_device_properties": lambda device=None: props,
        "get_device_capability": lambda device=None: capability,
        "is_bf16_supported": lambda including_emulation=True: True,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "Event": _Event,
        "Stream": _Stream,
        "current_stream": lambda device=None: default_stream,
        "default_stream": lambda device=None: default_stream,
        "stream": lambda stream=None: stream or default_stream,
    }
    memory_fns = _memory_functions(torch, total, usable)
    fns.update(memory_fns)
    for k, f in fns.items():
        setattr(cuda, k, f)
    # device-generic code finds a tensor's device module by its device type
    # (`getattr(torch, t.device.type)`: FSDP2's streams and events): the device's tensors are
    # meta here, and their module is CUDA's as faked here
    torch.meta = cuda
    # the device-generic API (torch.accelerator; FSDP2's default mesh asks torch._C) says CUDA
    cuda_device = torch.device("cuda")
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        for k, f in {
            "is_available": lambda: True,
            "current_accelerator": lambda check_available=False: cuda_device,
            "device_count": lambda: cuda.device_count(),
            "current_device_index": lambda: 0,
            "current_device_idx": lambda: 0,
            "set_device_index": lambda device: None,
            "set_device_idx": lambda device: None,
            "synchronize": lambda device=None: None,
            "current_stream": lambda device=None: default_stream,
        }.items():
            if hasattr(accelerator, k):
                setattr(accelerator, k, f)
    if hasattr(torch._C, "_get_accelerator"):
        torch._C._get_accelerator = lambda check=False: cuda_device
    for k in ("get_rng_state", "get_rng_state_all"):
        setattr(cuda, k, lambda device=None: torch.zeros(16, dtype=torch.uint8))
    for k in ("set_rng_state", "set_rng_state_all", "seed", "seed_all"):
        setattr(cuda, k, lambda *a, **kw: None)
    cuda.initial_seed = lambda: 0
    cuda._lazy_init = lambda: None
    # the allocator's history has nothing to record: an empty snapshot, where one is asked for
    empty = {"segments": [], "device_traces": [[]]}

    def dump_snapshot(filename="dump_snapshot.pickle"):
        # an empty snapshot would replace a real one the user keeps: written nowhere, said
        fake_files.unwritten("torch.cuda.memory._dump_snapshot", filename)

    memory = getattr(cuda, "memory", None)
    if memory is not None:
        for k, f in memory_fns.items():
            if hasattr(memory, k):
                setattr(memory, k, f)
        memory._record_memory_history = lambda *a, **k: None
        memory._snapshot = lambda device=None: empty
        memory._dump_snapshot = dump_snapshot
    # the optimizers' default: foreach where every parameter is on a device that has it
    for modname in ("torch.optim.optimizer", "torch.utils._foreach_utils"):
        mod = sys.modules.get(modname)
        if mod is None:
            try:
                __import__(modname)
                mod = sys.modules[modname]
            except Exception:
                continue
        for fn in ("_get_foreach_kernels_supported_devices", "_get_fused_kernels_supported_devices"):
            orig = getattr(mod, fn, None)
            if orig is not None:
                setattr(mod, fn, lambda o=orig: list(o()) + ["meta"])
    # step()'s check for CUDA graph capture asks the real device for its stream
    opt = getattr(torch.optim, "Optimizer", None)
    if opt is not None and hasattr(opt, "_accelerator_graph_capture_health_check"):
        opt._accelerator_graph_capture_health_check = lambda self: None


def install(torch):
    """Make this process run as if on the GPU `MEMTRACK_ESTIMATE_GPU`
    ("NAME;BYTES;MAJOR.MINOR;USABLE_BYTES") (after ops.install: its storage accounting is
    redirected to fake_memory)."""
    name, total, cap, usable = "NVIDIA H100 80GB HBM3", 80 * 2**30, (9, 0), None
    spec = os.environ.get("MEMTRACK_ESTIMATE_GPU", "")
    try:
        n, b, c, u = spec.split(";")
        major, minor = c.split(".")
        name, total, cap, usable = n, int(b), (int(major), int(minor)), int(u)
    except ValueError:
        pass
    fake_memory.capability[0] = cap
    fake_memory.install(torch)
    fake_values.install(torch)
    fake_kernels.install(torch)
    if ops.mode is not None:
        _wrap_dispatch(torch, type(ops.mode))
    _patch_cuda(torch, name, total, cap, usable if usable is not None else total)
    fake_mode.patch_modules(torch)
    fake_files.install(torch)
    fake_dist.install(torch)
    transport.message(
        {
            "t": MSG_DEVICE,
            "name": name,
            "total_bytes": total,
            "index": 0,
            "usable_bytes": usable,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "nccl_allowance": int(os.environ.get("MEMTRACK_ESTIMATE_NCCL_ALLOWANCE", "0") or 0),
        }
    )
    fake_autocast.install(torch, lambda t: t.is_meta and fake_memory.uncounted_kind(t) is None)
    fake_mode.watch_device_context(torch)
    mode = fake_mode.mode_class(torch)()
    mode.__enter__()
    state.backend = "estimate"
