"""Optimizer hooks: optimizer.step() begins and ends (its own ops are `{Optimizer}.step.*`, its
new tensors Optstate), the optimizer's state counted as Optstate after each step, a closure
passed to step() run as the program's own code, and optimizers whose step is compiled (no
hook of theirs runs) swept after each compiled graph.
"""

import functools
import weakref

from . import modules, ops, state
from .dynamo import is_compiling
from .names import Roots, name_id, rename
from .protocol import OPT, OPT_BEGIN, OPT_END
from .transport import ap, ext, internal_error

hooks = None  # the OptimizerHooks, once installed


class OptimizerHooks:
    """The global step pre/post hooks and every optimizer made.

    A compiled optimizer step (torch.compile of a function calling opt.step()) traces these
    hooks: as the module hooks, they trace to nothing (no graph break, no frame of their own);
    the step's compiled graphs are sampled when they run. Such an optimizer's state is then
    created and replaced inside compiled code, and no hook of its runs: after each compiled
    graph, the state of every optimizer whose hooks never ran is counted as Optstate (as the
    post-step hook does for the others: sweep)."""

    def __init__(self, torch):
        self.Tensor = torch.Tensor
        self.opt_ids = weakref.WeakKeyDictionary()  # optimizer -> name id
        self.roots = Roots()  # optimizers by class name
        self.optimizers = weakref.WeakSet()  # every optimizer made
        self.eager = weakref.WeakSet()  # those whose step hooks have run
        self.versions = weakref.WeakKeyDictionary()  # optimizer -> its state's versions

    def track_state(self, opt):
        """MemTracker's _track_optimizer_states: the optimizer's state tensors are Optstate.
        Returns how many tensors the state holds plus their version counters' sum: it
        changes when a step ran."""
        versions = 0
        try:
            Tensor = self.Tensor
            for st in opt.state.values():
                for v in st.values():
                    if isinstance(v, Tensor):
                        ops.track_as(v, OPT)
                        try:
                            versions += 1 + v._version
                        except RuntimeError:
                            versions += 1  # an inference tensor keeps no version
        except Exception as e:
            internal_error(e)
        return versions

    def sweep(self):
        if len(self.optimizers) == len(self.eager):
            return
        for opt in list(self.optimizers):
            if opt not in self.eager:
                # a compiled step runs no hook: its state changing in place says it ran,
                # which ends the iteration as the post-step hook does
                versions = self.track_state(opt)
                if versions != self.versions.get(opt, 0):
                    self.versions[opt] = versions
                    if modules.tracker is not None:
                        modules.tracker.step_ended()

    def step_begins(self, opt, args, kwargs):
        self.eager.add(opt)
        ops.in_opt = True
        oid = self.opt_ids.get(opt)
        if oid is None:
            oid = self.opt_ids[opt] = name_id(self.roots.claim(opt, type(opt).__name__, _rename))
        ext((OPT_BEGIN, oid))
        # step(closure) (LBFGS, Lightning) runs forward and backward inside the step: those
        # ops belong to their modules, their tensors to their own categories
        if "closure" in kwargs and callable(kwargs["closure"]):
            return args, dict(kwargs, closure=functools.partial(run_closure, kwargs["closure"], oid))
        # args[0] is the optimizer itself (Optimizer.profile_hook_step passes step's args)
        if len(args) > 1 and callable(args[1]):
            return (args[0], functools.partial(run_closure, args[1], oid), *args[2:]), kwargs
        return None

    def step_ends(self, opt):
        self.track_state(opt)
        ops.in_opt = False
        ap(OPT_END)
        if modules.tracker is not None:
            modules.tracker.step_ended()


def _rename(opt, old, new):
    """Another live optimizer of opt's class appeared: opt's name, `old`, becomes `new`."""
    rename(old, new)


def run_closure(closure, oid, *a, **k):
    """The closure passed to step(), run outside the step."""
    if not state.active:
        return closure(*a, **k)
    ops.in_opt = False
    try:
        ap(OPT_END)
    except Exception as e:
        internal_error(e)
    try:
        return closure(*a, **k)
    finally:
        ops.in_opt = True
        try:
            ext((OPT_BEGIN, oid))
        except Exception as e:
            internal_error(e)


# A compiled step traces the hooks: is_compiling() is a constant True then, so they trace to
# nothing.
_is_compiling = None


def pre_step_hook(opt, args, kwargs):
    """The global optimizer step pre-hook."""
    if _is_compiling() or not state.active:
        return None
    try:
        return hooks.step_begins(opt, args, kwargs)
    except Exception as e:
        internal_error(e)
        return None


def post_step_hook(opt, args, kwargs):
    """The global optimizer step post-hook."""
    if _is_compiling() or not state.active:
        return
    try:
        hooks.step_ends(opt)
    except Exception as e:
        internal_error(e)


def install(torch):
    """Register the step hooks and watch Optimizer.__init__; returns the hooks."""
    global hooks, _is_compiling
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    _is_compiling = is_compiling(torch)
    hooks = OptimizerHooks(torch)
    if modules.tracker is not None:
        # an optimizer's step, not a backward, ends a training iteration
        modules.tracker.optimizers = hooks.optimizers
    Optimizer = torch.optim.Optimizer
    orig_init = Optimizer.__init__
    optimizers = hooks.optimizers

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        try:
            if not _is_compiling():
                optimizers.add(self)
        except Exception as e:
            internal_error(e)

    Optimizer.__init__ = __init__
    handles = [
        register_optimizer_step_pre_hook(pre_step_hook),
        register_optimizer_step_post_hook(post_step_hook),
    ]

    def undo():
        Optimizer.__init__ = orig_init
        for h in handles:
            h.remove()

    state.undo.append(undo)
    return hooks
