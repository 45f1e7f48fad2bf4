"""`memtrack estimate` under `torch.autocast("cuda")`. Autocast works through dispatch keys that
only CUDA tensors carry, so on the meta tensors that stand for them every op would run in its
inputs' dtype: fp32 activations where CUDA keeps bf16 or fp16 ones. CUDA's autocast policy is
applied here instead, by fake_cuda's function mode, above autograd as autocast's own kernels
are (so backward saves, and casts back, what it would on CUDA):

- the ops autocast runs in lower precision (matmuls, linear, convolutions, attention, RNN
  cells) get their floating inputs cast to the autocast dtype; a leaf fp32 tensor that
  requires grad (a weight) is cast once per autocast region and the copy kept until its end,
  as autocast's cast cache does;
- the ops it runs in fp32 (norms, losses, exp/log/pow and the like) get theirs cast to fp32;
- softmax, log_softmax, sum, prod, cumsum, cumprod and the vector and matrix norms are asked
  for an fp32 result, as autocast does when the program names no dtype;
- everything else runs in its inputs' dtypes, as under autocast.

The lists are autocast_mode.cpp's CUDA ones, at the level of the functions a program calls
(a composite op that autocast does not list, such as cross_entropy, gets the policy of the ops
it is made of). fp64 tensors are never cast, nor tensors that stand for host memory.
"""

_torch = None
_is_device = None  # fake_cuda's test: a meta tensor that stands for CUDA memory
_policy = {}  # function -> LOWER, FP32 or (FP32_RESULT, position of its dtype argument)
_cache = {}  # id(weight) -> (weight, its cast): autocast's cast cache
LOWER = "lower"
FP32 = "fp32"
FP32_RESULT = "fp32_result"

_LOWER = (
    "nn.functional.linear matmul Tensor.matmul Tensor.__matmul__ Tensor.__rmatmul__ mm Tensor.mm "
    "bmm Tensor.bmm addmm Tensor.addmm baddbmm Tensor.baddbmm addbmm Tensor.addbmm addmv "
    "Tensor.addmv mv Tensor.mv addr Tensor.addr einsum chain_matmul linalg.multi_dot "
    "linalg.vecdot conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d "
    "conv_tbc convolution _convolution prelu nn.functional.prelu "
    "nn.functional.scaled_dot_product_attention lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell"
)
_FP32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow "
    "Tensor.acos Tensor.asin Tensor.cosh Tensor.erfinv Tensor.exp Tensor.expm1 Tensor.log "
    "Tensor.log10 Tensor.log2 Tensor.log1p Tensor.reciprocal Tensor.rsqrt Tensor.sinh "
    "Tensor.tan Tensor.pow Tensor.__pow__ Tensor.__rpow__ "
    "layer_norm native_layer_norm group_norm nn.functional.layer_norm nn.functional.group_norm "
    "nn.functional.softplus nn.functional.cosine_similarity cosine_similarity "
    "nn.functional.poisson_nll_loss nn.functional.cosine_embedding_loss nn.functional.nll_loss "
    "nn.functional.hinge_embedding_loss nn.functional.kl_div nn.functional.l1_loss "
    "nn.functional.smooth_l1_loss nn.functional.huber_loss nn.functional.mse_loss "
    "nn.functional.margin_ranking_loss nn.functional.multilabel_margin_loss "
    "nn.functional.soft_margin_loss nn.functional.triplet_margin_loss "
    "nn.functional.multi_margin_loss nn.functional.binary_cross_entropy_with_logits "
    "nn.functional.cross_entropy dist pdist cdist renorm logsumexp Tensor.logsumexp "
    "Tensor.renorm Tensor.dist"
)
# (function, position of its dtype argument; None: keyword only)
_FP32_RESULT = (
    ("softmax", 2), ("Tensor.softmax", 2), ("nn.functional.softmax", 3),
    ("log_softmax", 2), ("Tensor.log_softmax", 2), ("nn.functional.log_softmax", 3),
    ("cumsum", None), ("Tensor.cumsum", None), ("cumprod", None), ("Tensor.cumprod", None),
    ("sum", None), ("Tensor.sum", None), ("prod", None), ("Tensor.prod", None),
    ("linalg.vector_norm", None), ("linalg.matrix_norm", None),
)


def _resolve(torch, dotted):
    obj = torch
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def install(torch, is_device):
    """Fill the policy from this torch's functions; clear the cast cache where autocast does
    (when the outermost autocast region ends)."""
    global _torch, _is_device
    _torch, _is_device = torch, is_device
    for names, how in ((_LOWER, LOWER), (_FP32, FP32)):
        for name in names.split():
            f = _resolve(torch, name)
            if f is not None:
                _policy[f] = how
    for name, position in _FP32_RESULT:
        f = _resolve(torch, name)
        if f is not None:
            _policy[f] = (FP32_RESULT, position)
    clear = getattr(torch, "clear_autocast_cache", None)
    if clear is not None:

        def clear_autocast_cache():
            _cache.clear()
            clear()

        torch.clear_autocast_cache = clear_autocast_cache


def _enabled_dtype():
    """The autocast dtype where autocast is on for CUDA, else None."""
    torch = _torch
    try:
        if not torch.is_autocast_enabled("cuda"):
            return None
        return torch.get_autocast_dtype("cuda")
    except TypeError:  # torch before 2.4: the CUDA ones take no device
        if not torch.is_autocast_enabled():
            return None
        return torch.get_autocast_gpu_dtype()


def _eligible(t):
    return (
        isinstance(t, _torch.Tensor)
        and t.is_floating_point()
        and t.dtype != _torch.float64
        and _is_device(t)
    )


def _cast(t, dtype, lower):
    if not _eligible(t) or t.dtype == dtype:
        return t
    cacheable = (
        lower
        and t.dtype == _torch.float32
        and t.requires_grad
        and t.is_leaf
        and not t._is_view()
        and _torch.is_autocast_cache_enabled()
    )
    if not cacheable:
        return t.to(dtype)
    hit = _cache.get(id(t))
    if hit is not None and hit[0] is t:
        return hit[1]
    cast = t.to(dtype)
    _cache[id(t)] = (t, cast)
    return cast


def _cast_all(value, dtype, lower):
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_all(v, dtype, lower) for v in value)
    return _cast(value, dtype, lower)


def apply(func, args, kwargs):
    """(args, kwargs) as autocast would give them to `func`; the same objects where autocast
    is off for CUDA or has no policy for `func`."""
    how = _policy.get(func)
    if how is None:
        return args, kwargs
    low = _enabled_dtype()
    if low is None:
        return args, kwargs
    if how == LOWER or how == FP32:
        dtype = low if how == LOWER else _torch.float32
        lower = how == LOWER
        # last argument first, as torch's build evaluates autocast's casts (GCC evaluates a
        # call's arguments right to left): the copies are made, and their gradients cast
        # back in backward, in the order CUDA's autocast makes them
        kwargs = {k: _cast_all(v, dtype, lower) for k, v in reversed(kwargs.items())}
        args = tuple(reversed([_cast_all(a, dtype, lower) for a in reversed(args)]))
        return args, kwargs
    _, position = how
    named = kwargs.get("dtype") is not None
    given = position is not None and len(args) > position and args[position] is not None
    if named or given or not (args and _eligible(args[0])):
        return args, kwargs
    kwargs = dict(kwargs)
    kwargs["dtype"] = _torch.float32
    return args, kwargs
