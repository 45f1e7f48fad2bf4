"""Warnings that C++ ops raise under the agent's dispatch mode keep the program's location
(module, registry, file and line), as they would without the mode.
"""

import sys

from . import ops, parts, state


def keep_warning_locations():
    """A warning a C++ op raises (TORCH_WARN) is handed to Python when the op's Python call
    returns, at the frame that called it: under the mode, _dispatch, not the program's line.
    Filters by module ("error" for __main__) and once-per-location would then see the agent.
    An "always" filter for this module (kept first) sends every such warning to
    warnings._showwarnmsg, wrapped here to issue it again from the frame below _dispatch with
    that frame's module, registry, file and line, as Python would have without the mode.
    Costs nothing per op; where the op ran on a thread with no Python frame below (CUDA
    backward), the warning keeps the agent's location (docs/record.md, Known limits). A
    warning the agent's own code raises (reading a fake tensor's storage) is not shown: it is
    nothing of the program's."""
    import re
    import warnings

    orig_show = getattr(warnings, "_showwarnmsg", None)
    if orig_show is None or not hasattr(warnings, "warn_explicit"):
        return
    # the agent's own frames: ops.py (the op's call) and parts.py (reading a tensor's parts)
    agent = rf"(?:{re.escape(ops.__name__)}|{re.escape(parts.__name__)})\Z"
    ours = ("always", None, Warning, re.compile(agent), 0)
    own_files = (ops.__file__, parts.__file__)
    dispatch_code = ops._dispatch.__code__
    call = getattr(ops._OpOverload, "__call__", None) if ops._OpOverload is not None else None
    call_code = getattr(call, "__code__", None)

    def _showwarnmsg(msg):
        try:
            f = sys._getframe(1)  # where it was raised
            if f.f_code.co_filename != msg.filename or f.f_lineno != msg.lineno:
                f = None
            elif f.f_code is call_code:  # func(...) from _dispatch: OpOverload.__call__ ran it
                f = f.f_back
            op_call = f is not None and f.f_code is dispatch_code
            user = f.f_back if op_call else None
            # the agent's own code (reading a fake tensor's storage): nothing of the program's
            own = not op_call and msg.filename in own_files
        except Exception:
            user, own = None, False
        if user is None:
            return None if own else orig_show(msg)
        g = user.f_globals
        registry = g.get("__warningregistry__")
        if registry is None:
            registry = g["__warningregistry__"] = {}
        # the program's filters decide now, an "error" one raising from the op's call
        warnings.warn_explicit(
            msg.message,
            msg.category,
            user.f_code.co_filename,
            user.f_lineno,
            g.get("__name__", "<string>"),
            registry,
            g,
        )

    def first():
        fl = warnings.filters
        if not fl or fl[0] is not ours:
            try:
                fl.remove(ours)
            except ValueError:
                pass
            fl.insert(0, ours)

    orig_mutated = getattr(warnings, "_filters_mutated", None)
    if orig_mutated is not None:

        def _filters_mutated():
            # simplefilter, filterwarnings, resetwarnings and catch_warnings all end here
            try:
                first()
            except Exception:
                pass
            orig_mutated()

        warnings._filters_mutated = _filters_mutated
    warnings._showwarnmsg = _showwarnmsg
    first()
    if orig_mutated is not None:
        orig_mutated()

    def undo():
        warnings._showwarnmsg = orig_show
        if orig_mutated is not None:
            warnings._filters_mutated = orig_mutated
        try:
            warnings.filters.remove(ours)
        except ValueError:
            pass
        if orig_mutated is not None:
            orig_mutated()

    state.undo.append(undo)
