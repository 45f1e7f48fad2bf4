"""torch.compile: a sample after every call of an Inductor-compiled graph (its outputs counted
first), module.compile() run under its module's hooks, PyTorch's warning about global hooks
silenced for torch.compile(module), and dynamo's counters for the goodbye.
"""

import functools
import sys
import types
import weakref

from . import modules, ops, optim, state
from .dynamo import skipper
from .protocol import COMPILED_GRAPH, MSG_AGENT_ERROR
from .transport import internal_error, message

_Tensor = None
_gtid = None


def after_compiled_graph(out):
    """A compiled graph ran. Its outputs (results and, in forward, what it saves for backward)
    were allocated inside generated code the mode never sees: account them now, then take one
    sample for the whole call."""
    if not state.active:
        return
    try:
        bw = _gtid() != -1
        if isinstance(out, (list, tuple)):
            for t in out:
                if isinstance(t, _Tensor):
                    ops.track(t, 0, bw)
        if optim.hooks is not None:
            optim.hooks.sweep()
        ops.sample(ops.intern(COMPILED_GRAPH, COMPILED_GRAPH, False), bw)
    except Exception as e:
        internal_error(e)


def watch_compiled_graphs(output_code):
    """Sample after every call of an Inductor-compiled graph (forward, backward, inference):
    the granularity at which compiled regions are measured. Called when
    torch._inductor.output_code is imported."""
    cls = getattr(output_code, "CompiledFxGraph", None)
    if cls is None:
        message({"t": MSG_AGENT_ERROR, "text": "torch._inductor: no CompiledFxGraph"})
        return
    _wrap_compiled_graph_call(cls)


def watch_compiled_graphs_in_codecache(codecache):
    """torch before 2.6 defines CompiledFxGraph in torch._inductor.codecache (no output_code);
    a later one imports it there from output_code, which watch_compiled_graphs watches."""
    cls = getattr(codecache, "CompiledFxGraph", None)
    if cls is not None and cls.__module__ == codecache.__name__:
        _wrap_compiled_graph_call(cls)


def _wrap_compiled_graph_call(cls):
    orig = cls.__call__

    def __call__(self, inputs):
        out = orig(self, inputs)
        if state.active:
            after_compiled_graph(out)
        return out

    cls.__call__ = __call__
    state.undo.append(lambda: setattr(cls, "__call__", orig))


def install(torch):
    """module.compile() and torch.compile(module) under the agent's module hooks."""
    global _Tensor, _gtid
    _Tensor = torch.Tensor
    _gtid = torch._C._current_graph_task_id
    _patch_module_compile(torch)
    import warnings

    # torch.compile(module) warns at every call that global hooks (ours) fire once more for
    # the OptimizedModule: the agent counts that module as the one it wraps (modules.wrapped)
    pattern = r"Using `torch\.compile\(module\)` when there are global hooks"
    warnings.filterwarnings("ignore", message=pattern)

    def undo():
        # by its pattern: the agent's own "always" filter is kept first (ops.py), so ours is
        # not necessarily filters[0]
        for f in list(warnings.filters):
            if f[0] == "ignore" and getattr(f[1], "pattern", None) == pattern:
                warnings.filters.remove(f)
        try:
            warnings._filters_mutated()
        except AttributeError:
            pass

    state.undo.append(undo)


def _patch_module_compile(torch):
    # module.compile() compiles the module's whole call, hooks included (they trace to
    # nothing): run them around the compiled call instead, as for torch.compile(module)'s
    # OptimizedModule, so the module's compiled graphs are its own
    orig_compile = torch.nn.Module.compile

    def compile(self, *args, **kwargs):
        orig_compile(self, *args, **kwargs)
        compiled = self.__dict__.get("_compiled_call_impl")
        if compiled is None:
            return
        wmod = weakref.ref(self)  # the call is stored on the module: no cycle through it
        self._compiled_call_impl = _HookedCompiledCall(wmod, compiled)

    torch.nn.Module.compile = compile
    state.undo.append(lambda: setattr(torch.nn.Module, "compile", orig_compile))


class _HookedCompiledCall:
    """A module's compiled call with the module's hooks run around it, outside."""

    __slots__ = ("wmod", "compiled")

    def __init__(self, wmod, compiled):
        self.wmod = wmod
        self.compiled = compiled

    def __call__(self, *a, **k):
        compiled = self.compiled
        mod = self.wmod()
        if mod is None:
            return compiled(*a, **k)
        tracker = modules.tracker
        modules.fw_pre_hook(mod, a)
        tracker.enter_inner(mod)
        try:
            out = compiled(*a, **k)
        finally:
            tracker.leave_inner(mod)
        modules.fw_post_hook(mod, a, out)
        return out


def watch_dynamo_calls(eval_frame):
    """torch before 2.9 (no TorchDispatchMode.ignore_compile_internals): dynamo guards each
    compiled frame on the thread's dispatch keys, which the agent's mode changes from the ones
    the frame was compiled under, so every call of a compiled function recompiled it (until
    dynamo's cache limit, then it ran eager). There, the agent's mode is taken off the dispatch
    stack while a function torch.compile made runs; its compiled graphs are still sampled,
    each call as one op (watch_compiled_graphs), and its modules are still seen (global hooks).
    Called when torch._dynamo.eval_frame is imported; does nothing on a torch that has it."""
    import torch.utils._python_dispatch as dispatch

    if hasattr(dispatch, "is_in_any_mode_without_ignore_compile_internals"):
        return
    current, pop, push = dispatch._get_current_dispatch_mode, dispatch._pop_mode, dispatch._push_mode

    def without_mode(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            mode = ops.mode
            if not state.active or current() is not mode:
                return fn(*args, **kwargs)
            pop()
            try:
                return fn(*args, **kwargs)
            finally:
                if state.active:  # not after a stop inside the call (an attach's detach)
                    push(mode)

        return call

    skip_code = skipper()
    if skip_code is not None:
        skip_code(without_mode(len).__code__)
    base = eval_frame._TorchDynamoContext
    for name in ("OptimizeContext", "RunOnlyContext"):
        cls = getattr(eval_frame, name, None)
        if cls is None or "__call__" in cls.__dict__:
            continue

        def __call__(self, fn, _orig=base.__call__):
            out = _orig(self, fn)
            # a function (torch.compile(fn), module.compile()); an OptimizedModule's forward
            # comes here on its own
            return without_mode(out) if isinstance(out, types.FunctionType) else out

        cls.__call__ = __call__
        state.undo.append(functools.partial(delattr, cls, "__call__"))


def counters():
    """What torch.compile did in this process (dynamo's own counters), if it was used."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        frames = utils.counters["frames"]
        breaks = utils.counters["graph_break"]
        if not frames:
            return None
        return {
            "frames_ok": int(frames.get("ok", 0)),
            "frames_total": int(frames.get("total", 0)),
            "graph_breaks": int(sum(breaks.values())),
            "graph_break_reasons": [r.split("\n")[0] for r in list(breaks)[:10]],
        }
    except Exception:
        return None
