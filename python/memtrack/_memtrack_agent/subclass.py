"""Tensor.as_subclass under the agent's dispatch mode, on a torch where it raises.

as_subclass makes the new subclass object around `self.alias()`. Under torch 2.3.1 that alias
goes through a dispatch mode, whose __torch_dispatch__ hands back a plain Python Tensor for it,
and as_subclass then raises "Creating a new Tensor subclass ... but the raw Tensor object is
already associated to a python object of type Tensor"; 2.15's does not. Every op on a plain Python subclass calls it too
(Tensor.__torch_function__ converts the op's result with it), so under such a torch the agent
would stop any program that uses one. There, and only there (found by trying it once under a
throwaway mode), Tensor.as_subclass becomes a wrapper that takes the agent's mode off the
dispatch stack for the call: the alias allocates nothing, so no sample is lost.
"""

from . import ops, state
from .transport import internal_error


def raises_under_a_mode(torch):
    """Whether this torch's as_subclass fails while a dispatch mode is on the stack."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        # (never under torch.compile: without this its __torch_dispatch__ is wrapped in
        # torch._disable_dynamo, whose first call imports torch._dynamo, ~1.7 s a process)
        @classmethod
        def _should_skip_dynamo(cls):
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Probe(torch.Tensor):
        pass

    with Passthrough():
        try:
            torch.empty(0).as_subclass(Probe)
        except RuntimeError:
            return True
    return False


def install(torch):
    """Where as_subclass raises under a mode, run it without the agent's mode; else nothing."""
    try:
        if "as_subclass" in torch.Tensor.__dict__ or not raises_under_a_mode(torch):
            return
        import torch.utils._python_dispatch as dispatch

        current, pop, push = dispatch._get_current_dispatch_mode, dispatch._pop_mode, dispatch._push_mode
        orig = torch._C.TensorBase.as_subclass
    except Exception as e:
        internal_error(e)
        return

    def as_subclass(self, cls):
        mode = ops.mode
        if not state.active or current() is not mode:
            # another mode on top: it would fail the same without the agent
            return orig(self, cls)
        pop()
        try:
            return orig(self, cls)
        finally:
            push(mode)

    as_subclass.__doc__ = orig.__doc__
    torch.Tensor.as_subclass = as_subclass
    state.undo.append(lambda: delattr(torch.Tensor, "as_subclass"))
