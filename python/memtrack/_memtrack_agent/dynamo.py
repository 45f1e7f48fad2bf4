"""torch.compile's tracer (dynamo) and the agent: marking the agent's code never to be traced.

The marking API lives in torch's C extension (torch._C._dynamo.eval_frame), loaded with torch;
importing torch._dynamo itself (with sympy and the rest of the compiler stack) would add about
a second to every process's start, so it is only the fallback for a torch without it there.
"""


def skipper():
    """A function marking a code object (and what it calls) as never traced by dynamo; None
    where this torch has no such API."""
    try:
        import torch

        frame = torch._C._dynamo.eval_frame
        strategy = frame._FrameExecStrategy(frame._FrameAction.SKIP, frame._FrameAction.SKIP)
        mark = frame.set_code_exec_strategy
        return lambda code: mark(code, strategy)
    except Exception:
        pass
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
        return lambda code: set_code_exec_strategy(code, strategy)
    except Exception:
        pass
    try:
        # an older torch: skips the marked code object only, not what it calls
        # (mark_every_function marks the rest)
        import torch

        return torch._C._dynamo.eval_frame.skip_code
    except Exception:
        return None


def mark_every_function(package):
    """Where dynamo's skip is not recursive, mark every function of the agent (the modules of
    `package` imported so far, nested functions included): else each one the program's
    compiled code reaches while dynamo is on (an optimizer hook's helpers) is a frame dynamo
    considers, and may compile, as if it were the program's."""
    import sys

    try:
        import torch

        frame = torch._C._dynamo.eval_frame
        if hasattr(frame, "set_code_exec_strategy"):
            return  # skipper's recursive skip
        skip = frame.skip_code
    except Exception:
        return

    def codes(code):
        yield code
        for c in code.co_consts:
            if isinstance(c, type(code)):
                yield from codes(c)

    seen = set()
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        for obj in list(vars(mod).values()):
            fns = [obj]
            if isinstance(obj, type) and obj.__module__ == name:
                fns = [getattr(f, "__func__", f) for f in vars(obj).values()]
            for f in fns:
                code = getattr(f, "__code__", None)
                if code is None or getattr(f, "__module__", None) != name or code in seen:
                    continue
                for c in codes(code):
                    seen.add(c)
                    skip(c)


def is_compiling(torch):
    """The check the agent's hooks make to do nothing while torch.compile traces them.

    torch.compiler.is_compiling is True while dynamo traces. torch before 2.9 (the torch that
    lacks TorchDispatchMode.ignore_compile_internals) can also keep a model's submodules as
    modules in the graph dynamo hands to AOTAutograd, which runs them, global hooks included,
    on fake tensors while the graph compiles: there, a compilation in progress
    (torch._guards.TracingContext) counts as compiling too."""
    check = torch.compiler.is_compiling
    try:
        import torch.utils._python_dispatch as dispatch

        if hasattr(dispatch, "is_in_any_mode_without_ignore_compile_internals"):
            return check
        tracing = torch._guards.TracingContext.try_get
    except Exception:
        return check

    def compiling():
        return check() or tracing() is not None

    skip_code = skipper()
    if skip_code is not None:  # else dynamo counts it as a frame of the program's
        skip_code(compiling.__code__)
    return compiling
