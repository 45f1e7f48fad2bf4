"""MemTracker's parameters and buffers: counted (PARAM, BUFFER, each parameter's gradient as
GRAD) at a module's first call in an iteration (ModuleTracker.mt_pre_fw, or module_path.h's
C copy of `track`), and the hooks that count each parameter's gradient when autograd makes
it, registered once per parameter.
"""

import weakref

from . import ops, state
from .protocol import BUFFER, GRAD, PARAM
from .transport import internal_error


def _grad_hook(grad):
    try:
        if state.active and grad is not None:
            ops.track_as(grad, GRAD)
    except Exception as e:
        internal_error(e)


def _post_acc_hook(p):
    try:
        if state.active and p.grad is not None:
            ops.track_as(p.grad, GRAD)
    except Exception as e:
        internal_error(e)


class Params:
    def __init__(self, torch):
        self.hooked = {}  # id(param) -> weakref: hooks installed once per parameter
        self.handles = []  # their handles, for an in-process recording to remove
        # a lazy module's parameter before it is materialized (in the module's own pre-hook,
        # after the global ones): it takes no hooks, and becomes a Parameter, the same object
        self.Uninitialized = getattr(torch.nn.parameter, "UninitializedTensorMixin", ())
        self.lazy_pending = set()  # id(module) whose call began with such parameters

    def track(self, mod):
        """Count mod's parameters (with their gradients) and buffers, and hook the parameters
        not hooked yet: (parameter bytes, buffer bytes)."""
        track_as = ops.track_as
        hooked = self.hooked
        pm = 0
        for p in mod.parameters():
            if isinstance(p, self.Uninitialized):
                # it holds nothing yet: counted, and hooked, after the call (materialized)
                self.lazy_pending.add(id(mod))
                continue
            pm += track_as(p, PARAM)
            if p.grad is not None:
                track_as(p.grad, GRAD)
            pid = id(p)
            h = hooked.get(pid)
            if h is None or h() is not p:
                try:
                    self.handles.append(p.register_hook(_grad_hook))
                    self.handles.append(p.register_post_accumulate_grad_hook(_post_acc_hook))
                except RuntimeError:
                    pass  # a parameter that does not require grad
                hooked[pid] = weakref.ref(p)
        bm = 0
        for b in mod.buffers():
            bm += track_as(b, BUFFER)
        return pm, bm

    def materialized(self, mod):
        """After the call of a module whose parameters were uninitialized as it began (a lazy
        module's, made in its own pre-hook): count them as parameters, and hook them."""
        self.lazy_pending.discard(id(mod))
        try:
            self.track(mod)
        except Exception as e:
            internal_error(e)

    def remove_hooks(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()
