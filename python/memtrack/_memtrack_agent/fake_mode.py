"""`memtrack estimate`'s function mode: CUDA tensors are meta tensors.

- A `device="cuda"` argument, `.cuda()` and `.to("cuda")` make meta tensors; a copy of a
  real CPU tensor keeps its values (fake_values), a copy back to the CPU reads them.
- Reads of values (`.item()`, `bool()`, `print(loss)`, `.tolist()`, `.numpy()`, `.cpu()`)
  answer the known values, or zeros said as unknown (fake_values).
- dropout and attention run CUDA's kernels (fake_kernels); autocast's CUDA policy is
  applied (fake_autocast).
- A function mode is off while its handler runs, so what a Python function of torch calls
  inside would not come to it. For the few whose insides matter the mode runs their body
  with itself on (`_opened`): backward and `autograd.grad` (hooks, activation checkpointing's
  recomputation, custom Functions' backward run inside them and must see CUDA as forward
  did: the same dropout, the same attention, so that recomputation saves the same tensors),
  and nn.MultiheadAttention's forward (its projections and attention are inside one call).
"""

import contextlib
import functools
import types

from . import fake_autocast, fake_kernels, fake_memory, fake_values
from .importhook import after_import

_torch = None


def _is_cuda(d):
    """Whether a device argument names CUDA: "cuda", "cuda:1", torch.device("cuda"), 0."""
    if isinstance(d, str):
        return d.startswith("cuda")
    if isinstance(d, int) and not isinstance(d, bool):
        return True
    return getattr(d, "type", None) == "cuda"


def _is_meta(d):
    return (d == "meta") if isinstance(d, str) else getattr(d, "type", None) == "meta"


def _is_cpu(d):
    if isinstance(d, str):
        return d.startswith("cpu")
    return getattr(d, "type", None) == "cpu"


def _default_device(device_context):
    """The device of a `with torch.device(...)` block or `set_default_device` (a
    DeviceContext on the function mode stack), or None."""
    from torch.overrides import _get_current_function_mode_stack

    for m in _get_current_function_mode_stack():
        if isinstance(m, device_context.DeviceContext):
            return m.device
    return None


_in_meta_context = [0]  # inside a meta DeviceContext's call (watch_device_context)


def _made_on_meta(d):
    """Whether a meta `device` argument is the program's own meta device (deferred
    initialisation), not a device tensor's `.device`, which says meta here too: a literal
    "meta", or the device of a `with torch.device("meta")` block."""
    if isinstance(d, str) or _in_meta_context[0]:
        return True
    import torch.utils._device as device_context

    current = _default_device(device_context)
    return getattr(current, "type", None) == "meta"


def watch_device_context(torch):
    """A `with torch.device("meta")` block's mode can sit above this one and give its device
    to the calls before this mode sees them: say when it does."""
    import torch.utils._device as device_context

    cls = device_context.DeviceContext
    orig = cls.__torch_function__

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(self.device, "type", None) != "meta":
            return orig(self, func, types, args, kwargs)
        _in_meta_context[0] += 1
        try:
            return orig(self, func, types, args, kwargs)
        finally:
            _in_meta_context[0] -= 1

    cls.__torch_function__ = __torch_function__
    after_import("accelerate.big_modeling", _watch_accelerate)

    # `module.to("meta")` hands its tensors a torch.device, as a device tensor's `.device`
    # is one: the string the program wrote says which
    module_to = torch.nn.Module.to

    def to(self, *args, **kwargs):
        d = kwargs.get("device", args[0] if args else None)
        meta = isinstance(d, str) and d.split(":")[0] == "meta"
        _in_meta_context[0] += meta
        try:
            return module_to(self, *args, **kwargs)
        finally:
            _in_meta_context[0] -= meta

    torch.nn.Module.to = functools.wraps(module_to)(to)


def _watch_accelerate(big_modeling):
    """accelerate's `init_on_device(meta)` (`init_empty_weights`) moves each parameter made
    inside it with `.to(torch.device("meta"))`: the program's own meta device, for the block."""
    inner = getattr(big_modeling, "init_on_device", None)
    if inner is None:
        return

    @contextlib.contextmanager
    def init_on_device(device, *args, **kwargs):
        meta = getattr(device, "type", device) == "meta"
        with inner(device, *args, **kwargs):
            _in_meta_context[0] += meta
            try:
                yield
            finally:
                _in_meta_context[0] -= meta

    big_modeling.init_on_device = functools.wraps(inner)(init_on_device)


def to_meta(t, dtype=None, host=False, kind=None):
    """A new meta tensor like `t` (a real CPU tensor or a host one): a copy to the GPU; with
    `host` (or `kind`) a stand-in that is not the device's memory."""
    kind = fake_memory.HOST if host else kind
    # (the function mode off: its "meta" is not the program's)
    with _torch._C.DisableTorchFunction():
        if kind is not None:
            with fake_memory.making(kind):
                out = _torch.empty_like(t, device="meta", dtype=dtype or t.dtype)
        else:
            out = _torch.empty_like(t, device="meta", dtype=dtype or t.dtype)
    if kind is None:
        values = fake_values.value(t) if t.is_meta else t
        if values is not None:
            fake_values.from_host(out, values if dtype in (None, t.dtype) else values.to(dtype))
    if t.requires_grad and out.is_floating_point():
        out.requires_grad_(True)
    return out


# inside an offload (FSDP's gradients to the CPU), a device tensor copied to the CPU is a
# host stand-in: a meta tensor, no memory of this machine's, as the offload's copies are
# not the device's memory either
offloading = [0]


def _to_cpu(t, what, dtype=None):
    """A device tensor copied to the CPU: its values where known, else zeros (a read); a host
    stand-in inside an offload, or where this machine's memory for zeros is spent
    (fake_values.placeholder)."""
    v = fake_values.value(t)
    if v is not None:
        v = v.clone()
    elif offloading[0] or not fake_values.placeholder_fits(t):
        return to_meta(t, dtype, host=True)
    else:
        fake_values.note_read(what)
        v = fake_values.placeholder(t)
    return v if dtype in (None, v.dtype) else v.to(dtype)


def _raw_device(args, kwargs):
    """The device argument of a `.to(...)` call as the program wrote it (a string, a
    torch.device, an int, or the tensor it names the device of), or None."""
    if "device" in kwargs:
        return kwargs["device"]
    if "other" in kwargs:
        return kwargs["other"]
    if len(args) > 1 and not isinstance(args[1], _torch.dtype):
        return args[1]
    return None


def _to(func, args, kwargs):
    t = args[0]
    kwargs = dict(kwargs)
    copy = bool(kwargs.pop("copy", False))  # (_parse_to does not take it)
    try:
        device, dtype, _non_blocking, _fmt = _torch._C._nn._parse_to(*args[1:], **kwargs)
    except Exception:
        return func(*args, copy=copy, **kwargs) if copy else func(*args, **kwargs)
    kind = fake_memory.uncounted_kind(t)
    same = (dtype is None or dtype == t.dtype) and not copy
    if device is not None and device.type == "meta":
        # the program's own meta device (deferred initialisation, accelerate's
        # init_empty_weights), or a device tensor's `.device` (`x.to(model.device)`,
        # `x.to(y)`, a host module's `.to(other.device)`): the device
        if _made_on_meta(_raw_device(args, kwargs)):
            if kind == fake_memory.META and same:
                return t
            return to_meta(t, dtype, kind=fake_memory.META)
        device = _torch.device("cuda", 0)
    if device is not None and _is_cuda(device):
        if t.is_meta and kind is None:
            return t if same else to_meta(t, dtype)
        return to_meta(t, dtype)
    if device is not None and _is_cpu(device) and t.is_meta:
        if kind == fake_memory.HOST:
            return t if same else to_meta(t, dtype, host=True)
        if kind is None:
            return _to_cpu(t, "copied to the CPU (.to)", dtype)
    if kind is not None:
        return to_meta(t, dtype, kind=kind) if not same else t
    return func(*args, copy=copy, **kwargs) if copy else func(*args, **kwargs)


def _cuda(func, args, kwargs):
    t = args[0]
    if t.is_meta and fake_memory.uncounted_kind(t) is None:
        return t
    return to_meta(t)


def _cpu(func, args, kwargs):
    t = args[0]
    if t.is_meta:
        if fake_memory.is_host(t):
            return t
        return _to_cpu(t, "copied to the CPU (.cpu)")
    return func(*args, **kwargs)


def _from_data(func, args, kwargs):
    """torch.tensor(data, device="cuda") and the like: made on the CPU from the host's data,
    then copied to the device, its values known (unless the data holds values read that the
    estimate does not have)."""
    import torch.utils._device as device_context

    d = kwargs.get("device")
    if d is None:
        d = _default_device(device_context)  # set_default_device("cuda"), below this mode
    # a device tensor's `.device` says meta here: data made for it is the device's too
    meta = d is not None and _is_meta(d)
    if meta and _made_on_meta(d):
        with fake_memory.making(fake_memory.META):
            return func(*args, **dict(kwargs, device="meta"))
    if d is None or not (_is_cuda(d) or meta) or (args and isinstance(args[0], _torch.Tensor)):
        if d is not None and (_is_cuda(d) or meta):
            kwargs = dict(kwargs, device="meta")
        return func(*args, **kwargs)
    before = fake_values.reads()
    t = func(*args, **dict(kwargs, device="cpu"))
    out = to_meta(t)
    # data holding values read, or device tensors torch read inside (their zeros)
    if (args and fake_values.holds_unknown(args[0])) or fake_values.reads() != before:
        fake_values.forget(out)
    return out


def _device_read(t):
    """A read of the values of a device tensor, or of a host stand-in (a copy of one)."""
    return t.is_meta and fake_memory.uncounted_kind(t) != fake_memory.META


def _reader(what, known, unknown):
    """A handler for a read of values: known(values, args) where they are known, else
    unknown(tensor, what, args), which says the read."""

    def read(func, args, kwargs):
        t = args[0]
        if not _device_read(t):
            return func(*args, **kwargs)
        v = fake_values.value(t)
        if v is not None:
            return known(v, args)
        return unknown(t, what, args)

    return read


def _scalar_read(t, what, args):
    return fake_values.unknown_scalar(t, what)


def _branch_read(t, what, args):
    fake_values.note_read(what, branch=True)
    return False


def _listed(t, what, args):
    return fake_values.zeros_list(t, what)


def _numpy_read(t, what, args):
    fake_values.note_read(what)
    return fake_values.placeholder(t).numpy()


def _as_device(text, t):
    """A CPU tensor's repr as the device tensor `t`'s: device='cuda:0' and its grad_fn."""
    body = text[:-1] if text.endswith(")") else text
    at = body.rfind(", dtype=")
    device = ", device='cuda:0'"
    body = body[:at] + device + body[at:] if at >= 0 else body + device
    if t.grad_fn is not None:
        body += f", grad_fn=<{type(t.grad_fn).__name__}>"
    elif t.requires_grad:
        body += ", requires_grad=True"
    return body + ")"


def _text(kind):
    """repr() / str() of a device tensor: its values, known or zeros, printed as CUDA's."""

    def text(func, args, kwargs):
        t = args[0]
        if not _device_read(t) or (type(t) is not _torch.Tensor and type(t) is not _torch.nn.Parameter):
            return func(*args, **kwargs)
        v = fake_values.value(t)
        if v is None:
            fake_values.note_read(kind)
            v = fake_values.placeholder(t)
        with _torch._C.DisableTorchFunction():
            text = repr(v.detach())
        return text if fake_memory.is_host(t) else _as_device(text, t)

    return text


def _format(func, args, kwargs):
    t = args[0]
    if not _device_read(t):
        return func(*args, **kwargs)
    spec = args[1] if len(args) > 1 else ""
    if t.dim() == 0:
        v = fake_values.value(t)
        x = v.item() if v is not None else fake_values.unknown_scalar(t, "format()")
        return format(x, spec)
    return _text("format()")(func, args, kwargs)


def _handlers(torch):
    T = torch.Tensor
    item = lambda v, a: v.item()  # noqa: E731
    return {
        T.to: _to,
        T.cuda: _cuda,
        T.cpu: _cpu,
        T.item: _reader("item()", item, _scalar_read),
        T.__int__: _reader("int()", lambda v, a: int(v), _scalar_read),
        T.__float__: _reader("float()", lambda v, a: float(v), _scalar_read),
        T.__index__: _reader("index", lambda v, a: v.__index__(), _scalar_read),
        T.__bool__: _reader("bool()", lambda v, a: bool(v), _branch_read),
        T.tolist: _reader("tolist()", lambda v, a: v.tolist(), _listed),
        T.numpy: _reader("numpy()", lambda v, a: v.numpy().copy(), _numpy_read),
        T.__format__: _format,
        T.__repr__: _text("print / repr()"),
        T.__str__: _text("print / str()"),
        T.pin_memory: lambda func, args, kwargs: args[0],
        torch.tensor: _from_data,
        torch.as_tensor: _from_data,
        torch.asarray: _from_data,
        torch.nn.functional.dropout: fake_kernels.dropout,
        torch.nn.functional.scaled_dot_product_attention: fake_kernels.sdpa,
    }


def _opened(f):
    """A copy of the Python function `f` whose own check for overrides says no: run with the
    mode on, its body runs and the functions it calls come to the mode."""
    no = lambda *a: False  # noqa: E731
    names = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
    scope = dict(f.__globals__, **{n: no for n in names})
    g = types.FunctionType(f.__code__, scope, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    return g


def _opened_functions(torch):
    opened = {}
    fns = (
        getattr(torch.nn.functional, "multi_head_attention_forward", None),
        torch.Tensor.backward,
        torch.autograd.backward,
        torch.autograd.grad,
    )
    for f in fns:
        if isinstance(f, types.FunctionType):
            opened[f] = _opened(f)
    return opened


def mode_class(torch):
    from torch.overrides import TorchFunctionMode

    global _torch
    _torch = torch
    import torch.utils._device as device_context

    Tensor = torch.Tensor
    handlers = _handlers(torch)
    opened = _opened_functions(torch)
    constructors = device_context._device_constructors()

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
            if d is None and func in constructors:
                # `with torch.device(...)` / set_default_device: its mode sits below this one
                # and gives the device after it; give it here
                d = _default_device(device_context)
                if d is not None:
                    kwargs = dict(kwargs, device=d)
            if d is not None and _is_cuda(d):
                kwargs = dict(kwargs)
                kwargs["device"] = "meta"
            elif d is not None and _is_meta(d) and _made_on_meta(d):
                with fake_memory.making(fake_memory.META):
                    return func(*args, **kwargs)
            elif args and isinstance(args[0], Tensor):
                # an op on a host tensor (a dtype change, an initialisation) stays host; one
                # on the program's own meta tensor stays meta; made like one on the CPU
                # (`to_empty(device="cpu")`, CPU offload), a host stand-in: not the device's,
                # and no memory of this machine's
                kind = fake_memory.uncounted_kind(args[0])
                if kind is not None:
                    if d is not None and _is_cpu(d):
                        kwargs = dict(kwargs, device="meta")
                        kind = fake_memory.HOST
                    with fake_memory.making(kind):
                        return func(*args, **kwargs)
            return func(*args, **kwargs)

    return CudaAsMeta


def patch_modules(torch):
    """Parameters and buffers registered on the CPU become host meta tensors; a small buffer
    keeps its values (a position table, a rotary embedding's frequencies)."""
    Module = torch.nn.Module
    Parameter = torch.nn.Parameter
    register_parameter, register_buffer = Module.register_parameter, Module.register_buffer

    def as_host(t, keep=False):
        if t is None or t.is_meta or t.device.type != "cpu":
            return t
        m = to_meta(t, host=True)
        if keep:
            fake_values.from_host(m, t)
        if isinstance(t, Parameter):
            p = Parameter(m, requires_grad=t.requires_grad)
            p.__dict__.update(t.__dict__)
            return p
        return m

    def patched_register_parameter(self, name, param):
        return register_parameter(self, name, as_host(param))

    def patched_register_buffer(self, name, tensor, persistent=True):
        return register_buffer(self, name, as_host(tensor, keep=True), persistent)

    Module.register_parameter = patched_register_parameter
    Module.register_buffer = patched_register_buffer
