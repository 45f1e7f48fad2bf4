"""torch.compile's tracer (dynamo) and the agent: marking the agent's code never to be traced."""


def skipper():
    """A function marking a code object (and what it calls) as never traced by dynamo; None
    where this torch has no such API."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
        return lambda code: set_code_exec_strategy(code, strategy)
    except Exception:
        return None
