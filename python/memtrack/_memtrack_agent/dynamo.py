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
        return None
