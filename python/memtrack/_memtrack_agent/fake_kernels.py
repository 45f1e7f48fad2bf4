"""`memtrack estimate`: where CUDA runs another kernel than the meta device, with other
allocations, the CUDA one; and sizes for the ops whose output size depends on values.

- dropout keeps a 1-byte mask (CUDA's fused native_dropout); the meta device's composite
  dropout keeps a mask of the input's dtype.
- scaled_dot_product_attention runs flash attention (fp16/bf16 without a mask, head size up
  to 256, compute capability 8.0 on; grouped query heads as they are) or memory-efficient
  attention (it takes a mask as bias; grouped heads repeated), saving the output and a
  log-sum-exp rather than the math path's whole attention matrix; the math path where the
  program turned both off (`sdpa_kernel`).
- `nonzero`, `masked_select`, `unique` and boolean-mask indexing have no meta kernel that
  knows their size: where the input's values are known (fake_values), the exact size; else
  the upper bound, every element selected (each such op is said, with the program's line).
  `bincount` and `repeat_interleave` have no bound: known values or an error that says so.
  `.item()` reached inside torch (a C++ op reading a scalar) is a read like the program's.
"""

from . import fake_memory, fake_values, transport

_torch = None
_library = []  # the torch.library.Library holding the meta kernels (kept alive)


def dropout(func, args, kwargs):
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


def sdpa(func, args, kwargs):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    a = dict(zip(names, args))
    a.update(kwargs)
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    mask = a.get("attn_mask")
    if not (isinstance(q, _torch.Tensor) and q.is_meta and q.dim() == 4):
        return func(*args, **kwargs)
    p = float(a.get("dropout_p", 0.0) or 0.0)
    causal = bool(a.get("is_causal", False))
    scale = a.get("scale")
    aten = _torch.ops.aten
    grad = _torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    backends = _torch.backends.cuda
    # flash attention needs compute capability 8.0 (not a V100's or a T4's); a program's
    # sdpa_kernel(...) choice turns backends off, as CUDA would follow it
    flash = fake_memory.capability[0] >= (8, 0) and backends.flash_sdp_enabled()
    if not (flash or backends.mem_efficient_sdp_enabled()):
        return func(*args, **kwargs)  # the math path, whose meta kernel is CUDA's too
    try:
        low = q.dtype in (_torch.float16, _torch.bfloat16)
        if flash and low and mask is None and q.shape[-1] <= 256:
            # flash attention takes grouped query heads as they are (enable_gqa)
            return aten._scaled_dot_product_flash_attention(q, k, v, p, causal, False, scale=scale)[0]
        if a.get("enable_gqa") and k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
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


# ---- ops whose output size depends on values


def _exact(op, *tensors, **kw):
    """The op run on the known values of `tensors` (meta), or None where any is unknown."""
    vs = []
    for t in tensors:
        v = fake_values.value(t) if isinstance(t, _torch.Tensor) and t.is_meta else t
        if v is None:
            return None
        vs.append(v)
    with _torch._C.DisableTorchFunction():
        return op(*vs, **kw)


def _like(cpu, dtype=None):
    """A meta tensor shaped as the CPU result `cpu`, holding its values."""
    with _torch._C.DisableTorchFunction():
        m = _torch.empty_strided(cpu.shape, cpu.stride(), dtype=dtype or cpu.dtype, device="meta")
    fake_values.remember(m, cpu)
    return m


def _meta(shape, dtype):
    with _torch._C.DisableTorchFunction():
        return _torch.empty(shape, dtype=dtype, device="meta")


def _nonzero(x):
    r = _exact(_torch.ops.aten.nonzero.default, x)
    if r is not None:
        return _like(r)
    fake_values.note_bound("nonzero")
    n = x.numel()
    with _torch._C.DisableTorchFunction():
        return _torch.empty_strided((n, x.dim()), (1, n), dtype=_torch.long, device="meta")


def _masked_select(x, mask):
    r = _exact(_torch.ops.aten.masked_select.default, x, mask)
    if r is not None:
        return _like(r)
    fake_values.note_bound("masked_select")
    return _meta((_torch.broadcast_shapes(x.shape, mask.shape).numel(),), x.dtype)


def _unique_outputs(x, n, dim, return_inverse, return_counts):
    shape = list(x.shape)
    if dim is None:
        out = _meta((n,), x.dtype)
        inverse = _meta(x.shape if return_inverse else (0,), _torch.long)
    else:
        shape[dim] = n
        out = _meta(tuple(shape), x.dtype)
        inverse = _meta((x.shape[dim],) if return_inverse else (0,), _torch.long)
    counts = _meta((n,) if return_counts else (0,), _torch.long)
    return out, inverse, counts


def _unique(name, op, x, dim, sorted_, return_inverse, return_counts, consecutive=False):
    if dim is None:
        args = (x, return_inverse, return_counts) if consecutive else (x, sorted_, return_inverse, return_counts)
    elif consecutive:
        args = (x, return_inverse, return_counts, dim)
    else:
        args = (x, dim, sorted_, return_inverse, return_counts)
    r = _exact(op, *args)
    if r is not None:
        return tuple(_like(t) for t in r)
    fake_values.note_bound(name)
    n = x.numel() if dim is None else x.shape[dim]
    return _unique_outputs(x, n, dim, return_inverse, return_counts)


def _unique2(x, sorted=True, return_inverse=False, return_counts=False):
    op = _torch.ops.aten._unique2.default
    return _unique("unique", op, x, None, sorted, return_inverse, return_counts)


def _unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    op = _torch.ops.aten.unique_dim.default
    return _unique("unique", op, x, dim, sorted, return_inverse, return_counts)


def _unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    op = _torch.ops.aten.unique_consecutive.default
    return _unique("unique_consecutive", op, x, dim, True, return_inverse, return_counts, True)


def _no_bound(name):
    raise NotImplementedError(
        f"memtrack estimate: the size of {name}'s output depends on values the estimate does "
        "not have (it has no upper bound); compute it from values the program knows on the host"
    )


def _bincount(x, weights=None, minlength=0):
    r = _exact(_torch.ops.aten.bincount.default, x, weights, minlength)
    if r is None:
        _no_bound("bincount")
    return _like(r)


def _repeat_interleave(repeats, output_size=None):
    if output_size is not None:
        return _meta((output_size,), repeats.dtype)
    r = _exact(_torch.ops.aten.repeat_interleave.Tensor, repeats)
    if r is None:
        _no_bound("repeat_interleave")
    return _like(r)


def _local_scalar_dense(x):
    """A scalar read inside torch's C++ (a size computed from a tensor)."""
    v = fake_values.value(x)
    if v is not None:
        return v.item()
    return fake_values.unknown_scalar(x, "item() (inside torch)")


def install(torch):
    global _torch
    _torch = torch
    lib = torch.library.Library("aten", "IMPL")
    _library.append(lib)
    kernels = (
        ("nonzero", _nonzero),
        ("masked_select", _masked_select),
        ("_unique2", _unique2),
        ("unique_dim", _unique_dim),
        ("unique_consecutive", _unique_consecutive),
        ("bincount", _bincount),
        ("repeat_interleave.Tensor", _repeat_interleave),
        ("_local_scalar_dense", _local_scalar_dense),
    )
    for name, fn in kernels:
        try:
            lib.impl(name, fn, "Meta")
        except Exception as e:
            transport.internal_error(RuntimeError(f"estimate: a meta kernel for {name}: {e}"))
