"""Tensor subclasses: a plain Python subclass (__torch_function__ only) and a wrapper
subclass without __tensor_flatten__ (_make_wrapper_subclass, no storage of its own: its
storage is a placeholder that raises when read), as an op's output and as a module's
parameter; and one that claims to be traceable but cannot say what it holds (its
__tensor_flatten__ raises: the agent's error, which it must report and swallow). Exits 0
alone; under `memtrack record` it must too."""

import torch
from torch import nn
from torch.utils._pytree import tree_map


class Tagged(torch.Tensor):
    pass


class Wrapper(torch.Tensor):
    """A wrapper subclass holding an inner tensor; it has no storage itself."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, requires_grad=inner.requires_grad
        )

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, Wrapper) else t
        wrap = lambda t: cls(t) if isinstance(t, torch.Tensor) else t
        return tree_map(wrap, func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {})))


class Opaque(Wrapper):
    """A traceable wrapper subclass in name only: flattening it fails."""

    def __tensor_flatten__(self):
        raise RuntimeError("Opaque cannot be flattened")

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        raise RuntimeError("Opaque cannot be unflattened")


torch.manual_seed(0)
lin = nn.Linear(8, 4)
x = torch.randn(2, 8).as_subclass(Tagged)
lin(x).sum().backward()
w = Wrapper(torch.randn(2, 8))
out = lin(w)
assert isinstance(out, Wrapper)
wlin = nn.Linear(8, 4)
wlin.weight = nn.Parameter(Wrapper(wlin.weight.detach()), requires_grad=False)
with torch.no_grad():
    out2 = wlin(torch.randn(2, 8))
assert isinstance(out2, Wrapper)
opaque = Opaque(torch.randn(2, 8)) * 2
assert isinstance(opaque, Opaque)
print("ok", float(out.inner.sum() + out2.inner.sum() + opaque.inner.sum()))
