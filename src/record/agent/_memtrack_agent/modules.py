"""Module and phase tracking: ModTracker's bookkeeping (module names, which modules are
running, forward or backward, activation-checkpoint recomputation) through global module
hooks and autograd hooks on each module's inputs and outputs, and MemTracker's states
(its pre/post forward/backward snapshots, iterations, fw_start / fw_bw_boundary markers).

The agent only reports these events; the collector computes the snapshots from them.
"""

import functools
import weakref

from . import ops, state
from .dynamo import skipper
from .names import name_id
from .protocol import (
    BUFFER,
    GRAD,
    INPUT,
    ITER,
    MARK,
    MOD,
    OUTPUT,
    PARAM,
    POP,
    POST_BW,
    POST_FW,
    POST_FW_AC,
    PRE_BW,
    PRE_FW,
    PRE_FW_AC,
    PUSH,
    RESET,
    SNAP,
)
from .transport import ap, ext, internal_error

tracker = None  # the ModuleTracker, once installed


# ---- names: ModTracker._get_mod_name


class ModInfo:
    """What the agent keeps on a module (in its __dict__): its key and its name."""

    __slots__ = ("obj_id", "mk", "name", "name_id", "seen")

    def __init__(self, obj_id, mk, name):
        self.obj_id = obj_id
        self.mk = mk
        self.name = name
        self.name_id = name_id(name)
        self.seen = False


_mod_count = [0]


def _info(mod):
    d = mod.__dict__
    info = d.get("_memtrack_info")
    if info is None or info.obj_id != id(mod):
        _mod_count[0] += 1
        info = d["_memtrack_info"] = ModInfo(id(mod), _mod_count[0], type(wrapped(mod)).__name__)
    return info


def wrapped(mod):
    """torch.compile(module) returns an OptimizedModule around it: named as what it wraps."""
    if type(mod).__name__ == "OptimizedModule":
        return mod.__dict__.get("_modules", {}).get("_orig_mod") or mod
    return mod


def _set_name(mod, name):
    info = _info(mod)
    if info.name != name:
        info.name = name
        info.name_id = name_id(name)
    return info


def mod_info(mod):
    """ModTracker._get_mod_name: an unknown module is named by its class; the first time a
    module is seen, its children are named under it."""
    info = _info(mod)
    if not info.seen:
        wrapper = wrapped(mod) is not mod
        for cname, sub in mod.named_children():
            # the wrapped module is the same module to the user: MLP.fc1, not MLP._orig_mod.fc1
            _set_name(sub, info.name if wrapper and cname == "_orig_mod" else f"{info.name}.{cname}")
            mod_info(sub)
        info.seen = True
    return info


def _leaves(seq, out):
    """tree_flatten's leaves of plain nested tuples and lists, into out; False (out partly
    filled) where another container is met."""
    for a in seq:
        t = type(a)
        if t is tuple or t is list:
            if not _leaves(a, out):
                return False
        elif isinstance(a, (tuple, list, dict)):
            return False
        else:
            out.append(a)
    return True


# ---- the hooks


class ModuleTracker:
    """The global module hooks and the state they share: ModTracker's `parents`, MemTracker's
    modules tracked in this iteration, the end-of-backward callback, activation
    checkpointing."""

    def __init__(self, torch):
        from torch.autograd.graph import register_multi_grad_hook
        from torch.utils._pytree import tree_flatten

        self.Tensor = torch.Tensor
        self.gtid = torch._C._current_graph_task_id
        self.engine = torch.autograd.Variable._execution_engine
        self.register_multi_grad_hook = register_multi_grad_hook
        self.tree_flatten = tree_flatten
        self.parents = {}  # name -> active count (ModTracker.parents without "Global")
        self.tracked = {}  # mk -> True: modules with stats in this iteration
        self.root = None  # the iteration's first top-level module
        self.has_callback = False
        self.post_bw_to_enqueue = []
        self.hooked_params = {}  # id(param) -> weakref: hooks installed once per parameter
        self.ac_mod = None  # the module whose forward is recomputed in backward (AC)
        # Modules whose compiled call is running under hooks that already ran for them,
        # outside: torch.compile(module)'s OptimizedModule (for the module it wraps) and
        # module.compile() (compiled.py). Dynamo runs the inner module's _call_impl eagerly
        # and would compile each global hook it calls as a frame of its own; the hooks are
        # marked never to be compiled (install), so they run here, eagerly, and stop at
        # this check.
        self.inner = {}  # id(module) -> how many of its compiled calls are running

    # -- inputs and outputs

    def flat(self, x):
        if isinstance(x, self.Tensor):
            return (x,)
        if type(x) is tuple or type(x) is list:
            # plain (nested) tuples and lists, as an RNN cell's (x, (h, c)), without pytree
            # (about 30 us a call); anything else pytree knows is left to it
            out = []
            if _leaves(x, out):
                return out
        return self.tree_flatten(x)[0]

    def io_mem(self, x):
        total = 0
        Tensor = self.Tensor
        for t in self.flat(x):
            if isinstance(t, Tensor):
                try:
                    for st in ops.storages(t):
                        nb = ops.storage_bytes(id(st))
                        if nb is not None:
                            total += nb
                except Exception:
                    pass
        return total

    def grad_tensors(self, x):
        Tensor = self.Tensor
        return [a for a in self.flat(x) if isinstance(a, Tensor) and a.requires_grad]

    # -- ModTracker's parents

    def add_parent(self, info, bw_push):
        name = info.name
        parents = self.parents
        if name not in parents:
            parents[name] = 1
            ext((PUSH, info.name_id, bw_push))
        else:
            parents[name] += 1

    def remove_parent(self, info):
        name = info.name
        parents = self.parents
        c = parents.get(name)
        if c is None:
            return
        if c <= 1:
            del parents[name]
            ext((POP, info.name_id))
        else:
            parents[name] = c - 1

    def engine_callback(self):
        try:
            self.parents.clear()
            self.has_callback = False
            ap(RESET)
        except Exception as e:
            internal_error(e)

    def maybe_set_engine_callback(self):
        if self.has_callback:
            return
        engine = self.engine
        for cb in reversed(self.post_bw_to_enqueue):
            engine.queue_callback(cb)
        self.post_bw_to_enqueue.clear()
        engine.queue_callback(self.engine_callback)
        self.has_callback = True

    # -- MemTracker's param/grad hooks

    @staticmethod
    def grad_hook(grad):
        try:
            if state.active and grad is not None:
                ops.track_as(grad, GRAD)
        except Exception as e:
            internal_error(e)

    @staticmethod
    def post_acc_hook(p):
        try:
            if state.active and p.grad is not None:
                ops.track_as(p.grad, GRAD)
        except Exception as e:
            internal_error(e)

    def track_params_and_buffers(self, mod):
        track_as = ops.track_as
        hooked_params = self.hooked_params
        pm = 0
        for p in mod.parameters():
            pm += track_as(p, PARAM)
            if p.grad is not None:
                track_as(p.grad, GRAD)
            pid = id(p)
            h = hooked_params.get(pid)
            if h is None or h() is not p:
                try:
                    p.register_hook(self.grad_hook)
                    p.register_post_accumulate_grad_hook(self.post_acc_hook)
                except RuntimeError:
                    pass  # a parameter that does not require grad
                hooked_params[pid] = weakref.ref(p)
        bm = 0
        for b in mod.buffers():
            bm += track_as(b, BUFFER)
        return pm, bm

    # -- MemTracker's user hooks, fed by the ModTracker emulation below

    def mt_pre_fw(self, mod, info, inputs, bw):
        mk = info.mk
        tracked = self.tracked
        if mk in tracked:
            if bw:
                ext((SNAP, mk, PRE_FW_AC))
                if self.ac_mod is None:
                    self.ac_mod = weakref.ref(mod)
                    ops.in_ac = True
                return
            if set(self.parents) - {info.name}:
                # a module called again inside the same forward: another call of it
                ext((INPUT, mk, info.name_id, self.io_mem(inputs)))
                ext((SNAP, mk, PRE_FW))
                return
            # a top-level module called again: the next iteration (MemTracker raises here)
            tracked.clear()
            ap(ITER)
        if not tracked:
            self.root = mk
            ext((MARK, 0))
        pm, bm = self.track_params_and_buffers(mod)
        tracked[mk] = True
        ext((MOD, mk, info.name_id, pm, bm, self.io_mem(inputs)))
        ext((SNAP, mk, PRE_FW))

    def mt_post_fw(self, mod, info, output, bw):
        mk = info.mk
        if mk not in self.tracked:
            return
        if bw:
            if self.ac_mod is not None and self.ac_mod() is mod:
                self.ac_mod = None
                ops.in_ac = False
            ext((SNAP, mk, POST_FW_AC))
        else:
            ext((OUTPUT, mk, self.io_mem(output)))
            ext((SNAP, mk, POST_FW))
            if self.root == mk:
                ext((MARK, 1))

    def backward_starts(self, wmod, info, *args):
        """A multi-grad hook on the module's outputs: its backward starts."""
        if not state.active:
            return
        try:
            self.maybe_set_engine_callback()
            self.add_parent(info, 1)
            mod = wmod()
            if mod is not None and info.mk in self.tracked:
                ext((SNAP, info.mk, PRE_BW))
        except Exception as e:
            internal_error(e)

    def backward_ends(self, wmod, info, *args):
        """A multi-grad hook on the module's inputs (or the end of backward): its backward
        ended."""
        if not state.active:
            return
        try:
            mod = wmod()
            if mod is not None and info.mk in self.tracked:
                ext((SNAP, info.mk, POST_BW))
            self.remove_parent(info)
        except Exception as e:
            internal_error(e)

    def on_grads(self, tensors, fn, mode):
        if len(tensors) == 1:
            tensors[0].register_hook(lambda g: fn(g))
        else:
            self.register_multi_grad_hook(tensors, fn, mode=mode)

    # -- compiled calls run under the hooks of the module they belong to

    def enter_inner(self, mod):
        k = id(mod)
        inner = self.inner
        inner[k] = inner.get(k, 0) + 1

    def leave_inner(self, mod):
        k = id(mod)
        inner = self.inner
        c = inner.get(k, 0)
        if c <= 1:
            inner.pop(k, None)
        else:
            inner[k] = c - 1

    # -- the global forward hooks

    def pre_forward(self, mod, inputs):
        if self.inner and id(mod) in self.inner:
            return
        try:
            w = wrapped(mod)
            if w is not mod:
                self.enter_inner(w)
            info = mod_info(mod)
            bw = self.gtid() != -1
            self.add_parent(info, 0)
            self.mt_pre_fw(mod, info, inputs, bw)
            if not bw:
                tensors = self.grad_tensors(inputs)
                ends = functools.partial(self.backward_ends, weakref.ref(mod), info)
                if tensors:
                    self.on_grads(tensors, ends, "all")
                else:
                    # ModTracker queues these until the next backward; a program that never
                    # runs one (inference) would grow the queue forever
                    if len(self.post_bw_to_enqueue) >= 100_000:
                        self.post_bw_to_enqueue.clear()
                    self.post_bw_to_enqueue.append(ends)
        except Exception as e:
            internal_error(e)

    def post_forward(self, mod, inputs, output):
        if self.inner and id(mod) in self.inner:
            return
        try:
            w = wrapped(mod)
            if w is not mod:
                self.leave_inner(w)
            info = mod_info(mod)
            bw = self.gtid() != -1
            self.mt_post_fw(mod, info, output, bw)
            self.remove_parent(info)
            if not bw:
                tensors = self.grad_tensors(output)
                if tensors:
                    starts = functools.partial(self.backward_starts, weakref.ref(mod), info)
                    self.on_grads(tensors, starts, "any")
        except Exception as e:
            internal_error(e)


# Dynamo traces global module hooks into the graphs it compiles: anything here would break the
# graph (or be frozen into it). is_compiling() is a constant True while tracing, so the hooks
# trace to nothing; in eager code they cost one call.
_is_compiling = None


def fw_pre_hook(mod, inputs):
    """The global forward pre-hook."""
    if _is_compiling() or not state.active:
        return
    tracker.pre_forward(mod, inputs)


def fw_post_hook(mod, inputs, output):
    """The global forward hook (always called, even when the forward raised)."""
    if _is_compiling() or not state.active:
        return
    tracker.post_forward(mod, inputs, output)


def install(torch):
    """Register the global module hooks; returns the tracker."""
    global tracker, _is_compiling
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    _is_compiling = torch.compiler.is_compiling
    tracker = ModuleTracker(torch)
    skip_code = skipper()
    if skip_code is not None:
        for f in (fw_pre_hook, fw_post_hook, ModuleTracker.pre_forward, ModuleTracker.post_forward):
            skip_code(f.__code__)
    register_module_forward_pre_hook(fw_pre_hook)
    register_module_forward_hook(fw_post_hook, always_call=True)
    return tracker
