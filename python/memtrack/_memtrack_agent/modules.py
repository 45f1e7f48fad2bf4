"""Module and phase tracking: ModTracker's bookkeeping (module names, which modules are
running, forward or backward, activation-checkpoint recomputation) through global module
hooks and autograd hooks on each module's inputs and outputs, and MemTracker's states
(its pre/post forward/backward snapshots, iterations, fw_start / fw_bw_boundary markers).

The agent only reports these events; the collector computes the snapshots from them.
"""

import functools
import threading
import weakref

from . import gradhooks, modnames, ops, state, threads, tracebacks
from .dynamo import is_compiling, skipper
from .gradhooks import on_grads, on_output_tensors
from .modnames import mod_info, wrapped
from .params import Params
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
    PUSH_BACKWARD,
    PUSH_FORWARD,
    PUSH_PASS_THROUGH,
    PUSH_RECOMPUTE,
    REF,
    RESET,
    SNAP,
)
from .transport import ap, ext, internal_error

tracker = None  # the ModuleTracker, once installed
_get_ident = threading.get_ident


class ThreadState:
    """What the tracker keeps per thread (threads.py): ModTracker's `parents` (the modules
    running in this thread), and the end-of-backward callback of a backward it runs."""

    __slots__ = ("parents", "has_callback", "post_bw_to_enqueue", "spent_hooks")

    def __init__(self):
        self.parents = {}  # name -> active count (ModTracker.parents without "Global")
        self.has_callback = False
        self.post_bw_to_enqueue = []
        self.spent_hooks = []  # handles of one-shot hooks on leaves that fired (on_leaf_grads)


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
        from torch.autograd.graph import _get_grad_fn_or_grad_acc
        from torch.utils._pytree import tree_flatten

        self.Tensor = torch.Tensor
        self.gtid = torch._C._current_graph_task_id
        self.engine = torch.autograd.Variable._execution_engine
        self.grad_acc = _get_grad_fn_or_grad_acc
        functorch = getattr(torch._C, "_functorch", None)
        self.functorch_level = getattr(functorch, "maybe_current_level", lambda: None)
        self.is_wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None)
        self.unwrap = getattr(functorch, "get_unwrapped", None)
        if self.is_wrapped is None or self.unwrap is None:
            self.functorch_level = lambda: None
        self.tree_flatten = tree_flatten
        # the main thread's (and every thread Python did not start: autograd's device
        # threads run its backward); threads the program started have their own
        self.main = ThreadState()
        self.states = {}  # threading.get_ident() -> ThreadState, for the threads started
        self.main_ident = threading.get_ident()  # the thread that started recording
        self.tracked = {}  # mk -> True: modules with stats in this iteration
        self.is_grad_enabled = torch.is_grad_enabled
        # The iteration (docs/record.md, "Iterations"): what happened in it so far,
        # which decides whether the next top-level forward begins another one.
        self.optimizers = ()  # every optimizer made (optim.install gives its WeakSet)
        self.it_stepped = False  # an optimizer step ended in it
        self.it_backward = False  # a backward ended in it
        self.it_grad = False  # a top-level forward in it ran with grad enabled
        self.it_after_step = False  # it began after an optimizer step ended
        self.it_roots = set()  # the top-level modules called in it
        self.root = None  # the iteration's first top-level module: its calls are marked
        self.root_call = None  # the top-level module whose marked forward runs now
        self.params = Params(torch)  # their counting at a first call, and their hooks
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

    def io_mem(self, leaves):
        """The bytes of the storages under flat(x)'s leaves."""
        total = 0
        Tensor = self.Tensor
        for t in leaves:
            if isinstance(t, Tensor):
                try:
                    for st in ops.storages(t):
                        nb = ops.storage_bytes(id(st))
                        if nb is not None:
                            total += nb
                except Exception:
                    pass
        return total

    def grad_tensors(self, leaves):
        """The tensors among leaves whose gradients a backward computes. Under a torch.func
        transform (vmap) a module sees functorch's wrappers, which do not require grad where
        the tensor they wrap does (vmap of a forward whose backward runs outside it): the
        wrapped tensor's autograd node is the one a backward runs, so hooks go on it."""
        Tensor = self.Tensor
        out = []
        transformed = None
        for a in leaves:
            if not isinstance(a, Tensor):
                continue
            if a.requires_grad:
                out.append(a)
                continue
            if transformed is None:
                transformed = self.functorch_level() is not None
            if transformed:
                while self.is_wrapped(a):
                    a = self.unwrap(a)
                    if a.requires_grad:
                        out.append(a)
                        break
        return out

    @staticmethod
    def passes_through(outputs, inputs):
        """Whether each output is one of the inputs, untouched (the same tensor at the same
        version): nn.Identity, Dropout(p=0) or in eval. Such a module creates no autograd
        node, so no backward op is its own; an input modified in place (ReLU(inplace=True))
        has a new version and a node of the module's."""
        if not inputs:
            return False
        for o in outputs:
            k = id(o)
            for t, v in inputs:
                if k == t and o._version == v:
                    break
            else:
                return False
        return True

    # -- ModTracker's parents

    def here(self):
        """This thread's state."""
        if self.states:
            st = self.states.get(_get_ident())
            if st is not None:
                return st
        return self.main

    def rename(self, old, new):
        """A running module's name changed (modnames._rename_root)."""
        for st in (self.main, *self.states.values()):
            if old in st.parents:
                st.parents[new] = st.parents.pop(old)

    def add_parent(self, info, how):
        name = info.name
        parents = self.here().parents
        if name not in parents:
            parents[name] = 1
            ext((PUSH, info.name_id, how))
        else:
            parents[name] += 1

    def remove_parent(self, info):
        name = info.name
        parents = self.here().parents
        c = parents.get(name)
        if c is None:
            return
        if c <= 1:
            del parents[name]
            ext((POP, info.name_id))
        else:
            parents[name] = c - 1

    def push_recomputed(self, info):
        """A module's forward runs in backward (activation checkpointing recomputes it): active
        again, whether or not its backward made it active already; each such push has its own
        POP (pop_recomputed), so its ops are named after it while it runs."""
        parents = self.here().parents
        parents[info.name] = parents.get(info.name, 0) + 1
        ext((PUSH, info.name_id, PUSH_RECOMPUTE))

    def pop_recomputed(self, info):
        parents = self.here().parents
        c = parents.get(info.name)
        if c is None:
            return  # the end of backward reset them
        if c <= 1:
            del parents[info.name]
        else:
            parents[info.name] = c - 1
        ext((POP, info.name_id))

    def engine_callback(self):
        try:
            st = self.here()
            for h in st.spent_hooks:
                h.remove()
            st.spent_hooks.clear()
            st.parents.clear()
            if st is self.main:
                self.it_backward = True
            st.has_callback = False
            ap(RESET)
        except Exception as e:
            internal_error(e)

    def maybe_set_engine_callback(self):
        st = self.here()
        if st.has_callback:
            return
        engine = self.engine
        for cb in reversed(st.post_bw_to_enqueue):
            engine.queue_callback(cb)
        st.post_bw_to_enqueue.clear()
        engine.queue_callback(self.engine_callback)
        st.has_callback = True

    # -- iterations

    def step_ended(self):
        """An optimizer's step() returned (optim.py): the iteration is over."""
        self.it_stepped = True

    def iteration_over(self, mk):
        """Whether a top-level forward of module `mk` begins a new iteration (the table in
        docs/record.md, "Iterations"): after an optimizer step; where an optimizer exists,
        only then (micro-batches, a cell unrolled over time), except that forward-only (no
        grad) passes are an iteration each; without one, after a backward, or when a
        top-level module is called again without one (where MemTracker raises)."""
        if self.it_stepped:
            return True
        grad = self.is_grad_enabled()
        if not grad or not self.it_grad:
            if not grad:
                # inference: a pass each, ended when a top-level module of it is called again
                # (`head(backbone(x))` is one pass); a no-grad call inside a training step
                # joins it
                if not self.it_grad:
                    return mk in self.it_roots
                return self.it_backward and not self.optimizers
            # the first training forward after forward-only calls: a new iteration, unless
            # those calls came right after the step (a frozen teacher's forward)
            return not (self.optimizers and self.it_after_step)
        if self.optimizers:
            return False
        return self.it_backward or mk in self.it_roots

    @staticmethod
    def has_parameters(mod):
        for _ in mod.parameters():
            return True
        return False

    def new_iteration(self):
        self.tracked.clear()
        self.it_after_step = self.it_stepped
        self.it_stepped = self.it_backward = self.it_grad = False
        self.it_roots.clear()
        ap(ITER)

    # -- MemTracker's user hooks, fed by the ModTracker emulation below

    def mt_pre_fw(self, mod, info, inputs, bw):
        """inputs: flat() of the call's inputs."""
        mk = info.mk
        tracked = self.tracked
        st = self.here()
        parents = st.parents
        # iterations are the main thread's: another thread's calls are counted apart (from
        # the stream's THREAD records) and run in the main thread's current iteration
        if not bw and st is self.main and len(parents) == 1 and parents.get(info.name) == 1:
            # a top-level forward (no other module running): perhaps the next iteration
            if tracked and self.iteration_over(mk):
                self.new_iteration()
            if not tracked:
                self.root = mk
            self.it_roots.add(mk)
            if self.is_grad_enabled():
                self.it_grad = True
            if mk == self.root or self.has_parameters(mod):
                # MemoryTracker marks its root module's forward: here the iteration's first
                # top-level module and any other with parameters (a second model, a head
                # called after a cell), not a loss module
                self.root_call = mk
                ext((MARK, 0))
        if mk in tracked:
            if bw:
                ext((SNAP, mk, PRE_FW_AC))
                if self.ac_mod is None:
                    self.ac_mod = weakref.ref(mod)
                    ops.in_ac = True
                return
            # a module called again in the same iteration: another call of it
            ext((INPUT, mk, info.name_id, self.io_mem(inputs)))
            ext((SNAP, mk, PRE_FW))
            return
        pm, bm = self.params.track(mod)
        tracked[mk] = True
        ext((MOD, mk, info.name_id, pm, bm, self.io_mem(inputs)))
        ext((SNAP, mk, PRE_FW))

    def mt_post_fw(self, mod, info, output, bw):
        """output: flat() of the call's output."""
        mk = info.mk
        if mk in self.tracked:
            if bw:
                if self.ac_mod is not None and self.ac_mod() is mod:
                    self.ac_mod = None
                    ops.in_ac = False
                ext((SNAP, mk, POST_FW_AC))
            else:
                ext((OUTPUT, mk, self.io_mem(output)))
                ext((SNAP, mk, POST_FW))
        st = self.here()
        if not bw and self.root_call == mk and st is self.main and len(st.parents) == 1:
            self.root_call = None
            ext((MARK, 1))

    def backward_starts(self, wmod, info, how, *args):
        """The pre-hook on the module's outputs' nodes (on_grads, "any"): its backward starts. `how` is
        PUSH_PASS_THROUGH for a module whose outputs are its inputs: it runs no node, and its
        outputs' and inputs' hooks fire together, the end first, so it stays active (for
        MemTracker's peaks, as in ModTracker) to the end of backward; the collector names no
        op after it."""
        if not state.active:
            return
        try:
            self.maybe_set_engine_callback()
            self.add_parent(info, how)
            mod = wmod()
            if mod is not None and info.mk in self.tracked:
                ext((SNAP, info.mk, PRE_BW))
        except Exception as e:
            internal_error(e)

    def backward_ends(self, wmod, info, *args):
        """The pre-hook on the module's inputs' nodes (on_grads, "all"), or the end of
        backward: its backward ended."""
        if not state.active:
            return
        try:
            mod = wmod()
            if mod is not None and info.mk in self.tracked:
                ext((SNAP, info.mk, POST_BW))
            self.remove_parent(info)
        except Exception as e:
            internal_error(e)

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
        if _get_ident() != self.main_ident and _get_ident() not in self.states:
            return  # a thread running before recording began: its ops are not seen either
        try:
            w = wrapped(mod)
            if w is not mod:
                self.enter_inner(w)
            info = mod_info(mod)
            bw = self.gtid() != -1
            if bw:
                self.push_recomputed(info)
            else:
                self.add_parent(info, PUSH_FORWARD)
            leaves = self.flat(inputs)  # once for both uses
            self.mt_pre_fw(mod, info, leaves, bw)
            if not bw:
                tensors = self.grad_tensors(leaves)
                seen = [[(id(t), t._version) for t in tensors], None]
                info.fw_inputs.append(seen)
                ends = functools.partial(self.backward_ends, info.wmod, info)
                if tensors:
                    seen[1] = on_grads(self, tensors, ends, "all")
                else:
                    # ModTracker queues these until the next backward; a program that never
                    # runs one (inference) would grow the queue forever
                    queued = self.here().post_bw_to_enqueue
                    if len(queued) >= 100_000:
                        queued.clear()
                    queued.append(ends)
        except Exception as e:
            internal_error(e)

    def post_forward(self, mod, inputs, output):
        if self.inner and id(mod) in self.inner:
            return
        if _get_ident() != self.main_ident and _get_ident() not in self.states:
            return  # a thread running before recording began: its ops are not seen either
        try:
            w = wrapped(mod)
            if w is not mod:
                self.leave_inner(w)
            info = mod_info(mod)
            bw = self.gtid() != -1
            leaves = () if bw else self.flat(output)  # read only outside backward
            self.mt_post_fw(mod, info, leaves, bw)
            if bw:
                self.pop_recomputed(info)
            else:
                self.remove_parent(info)
            if not bw:
                inputs_seen, inputs_hook = info.fw_inputs.pop() if info.fw_inputs else (None, None)
                tensors = self.grad_tensors(leaves)
                if tensors:
                    how = (
                        PUSH_PASS_THROUGH
                        if self.passes_through(tensors, inputs_seen)
                        else PUSH_BACKWARD
                    )
                    starts = functools.partial(self.backward_starts, info.wmod, info, how)
                    if mod._forward_hooks:
                        on_output_tensors(self, tensors, starts, inputs_hook)
                    else:
                        on_grads(self, tensors, starts, "any", inputs_hook)
        except Exception as e:
            internal_error(e)


# Dynamo traces global module hooks into the graphs it compiles: anything here would break the
# graph (or be frozen into it). is_compiling() is a constant True while tracing, so the hooks
# trace to nothing; in eager code they cost one call.
_is_compiling = None
# The compiled observer's module fast path (module_path.h, bind_native): module_pre(mod,
# inputs) and module_post(mod, output) do the commonest calls' work in C and return True, or
# return False, having done nothing, for the tracker's methods to do it.
_native_pre = _native_post = None


def fw_pre_hook(mod, inputs):
    """The global forward pre-hook."""
    if _is_compiling() or not state.active:
        return
    if _native_pre is not None and _native_pre(mod, inputs):
        return
    tracker.pre_forward(mod, inputs)


def fw_post_hook(mod, inputs, output):
    """The global forward hook (always called, even when the forward raised)."""
    if _is_compiling():
        return
    if output is None:
        tracebacks.mend_raising(mod)
    if not state.active:
        return
    if tracker.params.lazy_pending and id(mod) in tracker.params.lazy_pending:
        tracker.params.materialized(mod)
    if _native_post is not None and _native_post(mod, output):
        return
    tracker.post_forward(mod, inputs, output)


def bind_native(torch, ext):
    """Do the commonest module calls with the compiled observer `ext` (started with its CPU fast
    path, whose storage table and writers it uses): a submodule's call in the main thread,
    outside backward, on plain tensors (module_path.h says which)."""
    global _native_pre, _native_post
    codes = (PUSH, POP, SNAP, INPUT, OUTPUT, PRE_FW, POST_FW, PRE_BW, POST_BW, PUSH_FORWARD)
    codes += (PUSH_BACKWARD, PUSH_PASS_THROUGH, MOD, REF, PARAM, BUFFER, GRAD)
    ext.bind_modules(
        tracker, codes, torch.nn.Parameter, functools.partial, vars(state), torch.nn.Module
    )
    _native_pre, _native_post = ext.module_pre, ext.module_post

    def undo():
        global _native_pre, _native_post
        _native_pre = _native_post = None

    state.undo.append(undo)


def install(torch):
    """Register the global module hooks; returns the tracker."""
    global tracker, _is_compiling
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    _is_compiling = is_compiling(torch)
    gradhooks.bind(torch)
    tracker = ModuleTracker(torch)
    modnames.on_rename = tracker.rename
    threads._on_start.append(lambda ident: tracker.states.__setitem__(ident, ThreadState()))
    threads._on_end.append(lambda ident: tracker.states.pop(ident, None))
    skip_code = skipper()
    if skip_code is not None:
        for f in (fw_pre_hook, fw_post_hook, ModuleTracker.pre_forward, ModuleTracker.post_forward):
            skip_code(f.__code__)
    tracebacks.bind(torch)  # before any hook is registered
    handles = [
        register_module_forward_pre_hook(fw_pre_hook),
        register_module_forward_hook(fw_post_hook, always_call=True),
    ]
    tracebacks.agent_hooks(handles)

    def undo():
        for h in handles:
            h.remove()
        tracker.params.remove_hooks()

    state.undo.append(undo)
    return tracker
