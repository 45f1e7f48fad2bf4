"""`memtrack estimate`: the program runs as if on CUDA, with meta tensors standing for the GPU's
(docs/estimate.md). Meta tensors have shapes, dtypes and strides but no memory, so a model of
any size runs on a small machine; ops.py accounts their storages as device 0 (CUDA's 512-byte
rounding), and the collector replays those allocations through the caching-allocator model for
the reserved series.

What is changed, and why:
- `torch.cuda.is_available()` and friends say there is one GPU (the one named by `--gpu`), so
  the program takes its CUDA path.
- A `device="cuda"` argument, `.cuda()` and `.to("cuda")` make meta tensors (a function mode).
- Parameters and buffers a module registers on the CPU become meta tensors marked as host
  memory (not counted), so that building a 7B model does not need its 28 GB; moving them to
  CUDA makes a counted copy, as a real `.cuda()` does.
- Where CUDA would run another kernel than the meta device's and allocate differently, the
  CUDA one is called: dropout keeps a 1-byte mask (native_dropout), scaled_dot_product_attention
  runs flash (fp16/bf16) or memory-efficient attention (fp32) instead of the math path that
  saves the whole attention matrix, and optimizers take their foreach path as on CUDA.
- Under `torch.autocast("cuda")`, CUDA's autocast policy is applied (fake_autocast.py): meta
  tensors carry no autocast keys.
- A value read from a tensor (`.item()`, `bool()`, `print(loss)`, `.cpu()`, `.tolist()`) has
  no value here: a placeholder (zeros) is returned and the read is written, with the program's
  line, to MEMTRACK_ESTIMATE_READS, which `estimate` prints; it is never silent.
"""

import json
import os
import sys
import types
import weakref

from . import fake_autocast, ops, state, transport
from .protocol import MSG_DEVICE, OTH

_torch = None
_host = {}  # id(storage) -> weakref: meta storages standing for CPU tensors (not counted)
_making_host = [False]  # set while making such a storage
_reads = {}  # (file, line, what) -> count
_agent_dir = os.path.dirname(os.path.abspath(__file__))
_orig_new_storage = None
_orig_new_part = None


def _is_cuda(d):
    """Whether a device argument names CUDA: "cuda", "cuda:1", torch.device("cuda"), 0."""
    if isinstance(d, str):
        return d.startswith("cuda")
    if isinstance(d, int) and not isinstance(d, bool):
        return True
    return getattr(d, "type", None) == "cuda"


def _is_cpu(d):
    if isinstance(d, str):
        return d.startswith("cpu")
    return getattr(d, "type", None) == "cpu"


def _storage_key(t):
    try:
        return id(t.untyped_storage())
    except Exception:
        return None


def _is_host(t):
    return bool(_host) and t.is_meta and _storage_key(t) in _host


def _mark_host(t):
    try:
        st = t.untyped_storage()
    except Exception:
        return
    k = id(st)
    _host[k] = weakref.ref(st, lambda w, k=k: _host.pop(k, None))


def _new_storage(st, k, t, bw, sample=None):
    """ops._new_storage under estimate: a meta storage is the GPU's (device 0), unless it
    stands for host memory; a real CPU storage is host memory, never counted."""
    if not t.is_meta:
        return False
    if _making_host[0] or k in _host:
        if _making_host[0]:
            _host[k] = weakref.ref(st, lambda w, k=k: _host.pop(k, None))
        return False
    return ops._new_dense(st, k, bw, 0, sample)


def _new_part(st, k, cat):
    d = st.device
    if d.type != "meta" or _making_host[0] or k in _host:
        return None
    nb = -(-st.nbytes() // ops.min_alloc) * ops.min_alloc
    ops._known[k] = e = [cat, nb, weakref.ref(st, ops._death_callback(k))]
    ops._ext((ops.ADD, k, cat, 0, nb))
    return e


# cuBLAS's workspace, made by the first GEMM of each thread's handle (the program's thread
# runs forward, autograd's device thread backward): CUBLAS_WORKSPACE_CONFIG's default, ":4096:8"
# (32 MiB) from compute capability 9.0, ":4096:2:16:8" before; and cuBLASLt's 1 MiB for a GEMM
# with bias (addmm). Kept for the process's life, as the handles keep them.
_GEMMS = ("mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "addbmm", "_scaled_mm")
_LT_GEMMS = ("addmm", "_addmm_activation")
_workspaces = {}  # (backward, "blas"|"lt") -> the meta tensor that stands for it
_capability = [(9, 0)]


def _workspace_bytes(kind):
    if kind == "lt":
        return 1 << 20
    conf = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if not conf:
        conf = ":4096:8" if _capability[0] >= (9, 0) else ":4096:2:16:8"
    nums = [int(x) for x in conf.split(":") if x.strip().isdigit()]
    return sum(kib * 1024 * n for kib, n in zip(nums[::2], nums[1::2]))


def _count_workspace(func, bw):
    name = getattr(func, "_opname", "")
    if name not in _GEMMS:
        return
    for kind in ("blas", "lt") if name in _LT_GEMMS else ("blas",):
        if (bw, kind) in _workspaces:
            continue
        t = _torch.empty(_workspace_bytes(kind), dtype=_torch.uint8, device="meta")
        _workspaces[(bw, kind)] = t
        st = t.untyped_storage()
        k = id(st)
        ops._known[k] = [OTH, st.nbytes(), weakref.ref(st, ops._death_callback(k))]
        ops._ext((ops.ADD, k, OTH, 0, st.nbytes()))


def _wrap_dispatch(mode_class):
    """Count cuBLAS's workspaces where CUDA makes them: before the op's sample."""
    dispatch = mode_class.__torch_dispatch__
    gtid = _torch._C._current_graph_task_id

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "aten":
            try:
                _count_workspace(func, gtid() != -1)
            except Exception as e:
                transport.internal_error(e)
        return dispatch(self, func, types, args, kwargs)

    mode_class.__torch_dispatch__ = __torch_dispatch__


def _site():
    """The program's line that asked: the first frame outside torch and the agent."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if not (
            name.startswith(_agent_dir)
            or f"{os.sep}torch{os.sep}" in name
            or name.startswith("<frozen")
        ):
            return name, f.f_lineno
        f = f.f_back
    return "?", 0


def _note_read(what):
    name, line = _site()
    key = (name, line, what)
    _reads[key] = _reads.get(key, 0) + 1


def _placeholder(t):
    """Zeros on the CPU in the tensor's shape and dtype: what a read returns."""
    return _torch.zeros(tuple(t.shape), dtype=t.dtype)


def _to_meta(t, dtype=None, host=False):
    """A new meta tensor like `t` (a real CPU tensor or a host one): a copy to the GPU."""
    _making_host[0] = host
    try:
        out = _torch.empty_like(t, device="meta", dtype=dtype or t.dtype)
    finally:
        _making_host[0] = False
    if t.requires_grad and out.is_floating_point():
        out.requires_grad_(True)
    return out


def _to(func, args, kwargs):
    t = args[0]
    try:
        device, dtype, _non_blocking, _fmt = _torch._C._nn._parse_to(*args[1:], **kwargs)
    except Exception:
        return func(*args, **kwargs)
    if device is not None and _is_cuda(device):
        if t.is_meta and not _is_host(t):
            if dtype is None or dtype == t.dtype:
                return t
            return func(t, dtype=dtype)
        return _to_meta(t, dtype)
    if device is not None and _is_cpu(device) and t.is_meta:
        if _is_host(t):
            return t if dtype is None or dtype == t.dtype else _to_meta(t, dtype, host=True)
        _note_read("copied to the CPU (.to)")
        p = _placeholder(t)
        return p if dtype is None else p.to(dtype)
    if _is_host(t):
        return _to_meta(t, dtype, host=True) if dtype not in (None, t.dtype) else t
    return func(*args, **kwargs)


def _cuda(func, args, kwargs):
    t = args[0]
    if t.is_meta and not _is_host(t):
        return t
    return _to_meta(t)


def _cpu(func, args, kwargs):
    t = args[0]
    if t.is_meta:
        if _is_host(t):
            return t
        _note_read("copied to the CPU (.cpu)")
        return _placeholder(t)
    return func(*args, **kwargs)


def _reader(what, convert):
    def read(func, args, kwargs):
        t = args[0]
        if not t.is_meta:
            return func(*args, **kwargs)
        _note_read(what)
        return convert(t, args, kwargs)

    return read


def _scalar(t, args=(), kwargs=None):
    if t.dtype == _torch.bool:
        return False
    return 0.0 if t.is_floating_point() or t.is_complex() else 0


def _format(t, args, kwargs):
    spec = args[1] if len(args) > 1 else ""
    if t.dim() == 0:
        return format(_scalar(t), spec)
    return repr(t)


def _dropout(func, args, kwargs):
    """CUDA's fused dropout (native_dropout): a 1-byte mask; the meta device's composite
    dropout keeps a mask of the input's dtype."""
    names = ("input", "p", "training", "inplace")
    a = dict(zip(names, args))
    a.update(kwargs)
    x, p = a.get("input"), a.get("p", 0.5)
    if (
        a.get("training", True)
        and not a.get("inplace", False)
        and isinstance(x, _torch.Tensor)
        and x.is_meta
        and 0 < p < 1
    ):
        return _torch.native_dropout(x, p, True)[0]
    return func(*args, **kwargs)


def _sdpa(func, args, kwargs):
    """The attention CUDA would run: flash for fp16/bf16 without a mask (head size up to 256),
    else memory-efficient attention (it takes a mask as bias); both save the output and a
    log-sum-exp, not the attention matrix."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    a = dict(zip(names, args))
    a.update(kwargs)
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    mask = a.get("attn_mask")
    if not (isinstance(q, _torch.Tensor) and q.is_meta and q.dim() == 4):
        return func(*args, **kwargs)
    if a.get("enable_gqa") and k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    p = float(a.get("dropout_p", 0.0) or 0.0)
    causal = bool(a.get("is_causal", False))
    scale = a.get("scale")
    aten = _torch.ops.aten
    grad = _torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    try:
        if q.dtype in (_torch.float16, _torch.bfloat16) and mask is None and q.shape[-1] <= 256:
            return aten._scaled_dot_product_flash_attention(q, k, v, p, causal, False, scale=scale)[0]
        if mask is not None and mask.dtype == _torch.bool:
            mask = _torch.zeros(mask.shape, dtype=q.dtype, device="meta").masked_fill(
                mask.logical_not(), float("-inf")
            )
        return aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, grad, p, causal, scale=scale
        )[0]
    except Exception as e:
        transport.internal_error(e)
        return func(*args, **kwargs)


def _handlers(torch):
    T = torch.Tensor
    h = {
        T.to: _to,
        T.cuda: _cuda,
        T.cpu: _cpu,
        T.item: _reader("item()", _scalar),
        T.tolist: _reader("tolist()", lambda t, a, k: _placeholder(t).tolist()),
        T.numpy: _reader("numpy()", lambda t, a, k: _placeholder(t).numpy()),
        T.__bool__: _reader("bool()", lambda t, a, k: False),
        T.__int__: _reader("int()", lambda t, a, k: 0),
        T.__float__: _reader("float()", lambda t, a, k: 0.0),
        T.__index__: _reader("index", lambda t, a, k: 0),
        T.__format__: _reader("format()", _format),
        T.pin_memory: lambda func, args, kwargs: args[0],
        torch.nn.functional.dropout: _dropout,
        torch.nn.functional.scaled_dot_product_attention: _sdpa,
    }
    return h


def _opened(f):
    """A copy of the Python function `f` whose own check for overrides says no: run with the
    mode on, its body runs and the functions it calls come to the mode. A function mode
    otherwise sees the outer call alone (it is off while its handler runs), and
    nn.MultiheadAttention's projections and attention are inside one such call."""
    no = lambda *a: False  # noqa: E731
    names = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
    scope = dict(f.__globals__, **{n: no for n in names})
    g = types.FunctionType(f.__code__, scope, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    return g


def _mode_class(torch, handlers):
    from torch.overrides import TorchFunctionMode

    Tensor = torch.Tensor
    opened = {}
    mha = getattr(torch.nn.functional, "multi_head_attention_forward", None)
    if isinstance(mha, types.FunctionType):
        opened[mha] = _opened(mha)

    class CudaAsMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            body = opened.get(func)
            if body is not None:
                with self:
                    return body(*args, **kwargs)
            args, kwargs = fake_autocast.apply(func, args, kwargs)
            h = handlers.get(func)
            if h is not None:
                return h(func, args, kwargs)
            d = kwargs.get("device")
            if d is not None and _is_cuda(d):
                kwargs = dict(kwargs)
                kwargs["device"] = "meta"
            elif _host and args and isinstance(args[0], Tensor) and _is_host(args[0]):
                # an op on a host tensor (a dtype change, an initialisation) stays host
                _making_host[0] = True
                try:
                    return func(*args, **kwargs)
                finally:
                    _making_host[0] = False
            return func(*args, **kwargs)

    return CudaAsMeta


def _patch_modules(torch):
    """Parameters and buffers registered on the CPU become host meta tensors."""
    Module = torch.nn.Module
    Parameter = torch.nn.Parameter
    register_parameter, register_buffer = Module.register_parameter, Module.register_buffer

    def as_host(t):
        if t is None or t.is_meta or t.device.type != "cpu":
            return t
        m = _to_meta(t, host=True)
        if isinstance(t, Parameter):
            p = Parameter(m, requires_grad=t.requires_grad)
            p.__dict__.update(t.__dict__)
            return p
        return m

    def patched_register_parameter(self, name, param):
        return register_parameter(self, name, as_host(param))

    def patched_register_buffer(self, name, tensor, persistent=True):
        return register_buffer(self, name, as_host(tensor), persistent)

    Module.register_parameter = patched_register_parameter
    Module.register_buffer = patched_register_buffer


def _patch_cuda(torch, name, total, capability):
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

    def allocated(device=None):
        return sum(e[1] for e in ops._known.values())

    fns = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_device_name": lambda device=None: name,
        "get_device_properties": lambda device=None: props,
        "get_device_capability": lambda device=None: capability,
        "is_bf16_supported": lambda including_emulation=True: True,
        "reset_peak_memory_stats": lambda device=None: None,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
    }
    def asked(what):
        # the allocator model runs in the collector, after the program: what the program asks
        # now is the bytes of live device storages, and the estimate says it was asked
        def answer(device=None):
            _note_read(f"torch.cuda.{what}() (answered with the bytes allocated then)")
            return allocated()

        return answer

    for k in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        fns[k] = asked(k)
    fns["memory_stats"] = lambda device=None: {}
    for k, f in fns.items():
        setattr(cuda, k, f)
    # the allocator's history has nothing to record: an empty snapshot, where one is asked for
    empty = {"segments": [], "device_traces": [[]]}

    def dump_snapshot(filename="dump_snapshot.pickle"):
        import pickle

        with open(filename, "wb") as f:
            pickle.dump(empty, f)

    memory = getattr(cuda, "memory", None)
    if memory is not None:
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


def _write_reads():
    path = os.environ.get("MEMTRACK_ESTIMATE_READS")
    if not path:
        return
    try:
        rows = [
            {"file": f, "line": line, "what": what, "count": n}
            for (f, line, what), n in _reads.items()
        ]
        with open(path, "w") as out:
            json.dump(rows, out)
    except Exception as e:
        transport.internal_error(e)


def install(torch):
    """Make this process run as if on the GPU `MEMTRACK_ESTIMATE_GPU`
    ("NAME;BYTES;MAJOR.MINOR;USABLE_BYTES")
    (after ops.install: its storage accounting is redirected here)."""
    global _torch
    _torch = torch
    name, total, cap, usable = "NVIDIA H100 80GB HBM3", 80 * 2**30, (9, 0), None
    spec = os.environ.get("MEMTRACK_ESTIMATE_GPU", "")
    try:
        n, b, c, u = spec.split(";")
        major, minor = c.split(".")
        name, total, cap, usable = n, int(b), (int(major), int(minor)), int(u)
    except ValueError:
        pass
    _capability[0] = cap
    ops._new_storage = _new_storage
    if ops.mode is not None:
        _wrap_dispatch(type(ops.mode))
    ops._new_part = _new_part
    _patch_cuda(torch, name, total, cap)
    _patch_modules(torch)
    transport.message(
        {
            "t": MSG_DEVICE,
            "name": name,
            "total_bytes": total,
            "index": 0,
            "usable_bytes": usable,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        }
    )
    fake_autocast.install(torch, lambda t: t.is_meta and not _is_host(t))
    mode = _mode_class(torch, _handlers(torch))()
    mode.__enter__()
    import atexit

    atexit.register(_write_reads)
    state.backend = "estimate"
