"""A traceback through a module's forward reads as it does without memtrack.

With any hook registered (the agent's are global), `Module._call_impl` calls the forward
through its nested `inner()`, where a module without hooks calls it directly: each module
level's traceback would gain `return inner()` and `inner … result = forward_call(...)`. Where
the module alone would have taken the direct path (no hooks but the agent's), the two entries
become the one torch writes on that path, `_call_impl`'s `return forward_call(*args,
**kwargs)`, at the position Python gives it there (found once, by a module that raises before
any hook is registered: `bind`).

An exception is mended as it passes through each module: the agent's forward hook is always
called, also when the forward raised (torch calls it in `_call_impl`'s `except Exception`,
whose bare `raise` goes on with the exception's traceback as it is then: `mend_raising`). What
passes no such hook (KeyboardInterrupt, SystemExit) is mended in the excepthook, over the
whole traceback (`mend`). Nothing here runs unless an exception does.
"""

import sys
import types

_call_impl = None  # Module._call_impl's code
_inner = None  # the code of the `inner` it defines
_direct = None  # (tb_lasti, tb_lineno) of _call_impl's entry on the direct path
_globals = ()  # torch's dicts of global module hooks, and the agent's ids in them


class _Probe(Exception):
    pass


def bind(torch):
    """Learn the direct path's traceback entry from a module without hooks; call it before the
    agent registers its hooks. Leaves mending off where that cannot be learnt."""
    global _call_impl, _inner, _direct
    Module = torch.nn.Module
    code = getattr(Module._call_impl, "__code__", None)
    inner = [c for c in getattr(code, "co_consts", ()) if getattr(c, "co_name", "") == "inner"]
    if code is None or len(inner) != 1:
        return

    class Raises(Module):
        def forward(self):
            raise _Probe

    try:
        Raises()()
    except _Probe as e:
        tb = e.__traceback__
    except Exception:
        return
    entry = None
    while tb is not None:
        c = tb.tb_frame.f_code
        if c is inner[0]:
            return  # a global hook is there already: no direct path to learn
        if c is code:
            entry = (tb.tb_lasti, tb.tb_lineno)
        tb = tb.tb_next
    if entry is not None:
        _call_impl, _inner, _direct = code, inner[0], entry


def agent_hooks(handles):
    """The agent's global module hooks (their handles): a module with no other hook would take
    the direct path alone."""
    global _globals
    from torch.nn.modules import module as m

    ids = {h.id for h in handles}
    _globals = tuple(
        (d, ids)
        for d in (
            m._global_forward_pre_hooks,
            m._global_forward_hooks,
            m._global_backward_pre_hooks,
            m._global_backward_hooks,
        )
    )


def _direct_alone(mod):
    """Whether `mod`'s call would take the direct path without the agent's hooks."""
    try:
        if mod._forward_hooks or mod._forward_pre_hooks:
            return False
        if mod._backward_hooks or mod._backward_pre_hooks:
            return False
    except AttributeError:
        return False
    return all(k in ids for d, ids in _globals for k in d)


def mend_raising(mod):
    """Called by the forward hook with no output: where that is `_call_impl` handling an
    exception from `inner()`, its traceback reads as on the direct path from here on."""
    if _direct is None:
        return
    try:
        frame = sys._getframe(2)
        if frame.f_code is not _call_impl:
            return  # a forward that returned None, not one that raised
        exc = sys.exc_info()[1]
        head = getattr(exc, "__traceback__", None)
        if head is None or head.tb_frame is not frame or not _direct_alone(mod):
            return
        nxt = head.tb_next
        if nxt is not None and nxt.tb_frame.f_code is _inner:
            exc.__traceback__ = types.TracebackType(nxt.tb_next, frame, *_direct)
    except Exception:
        pass


def mend(exc):
    """Mend every module level of `exc`'s traceback, and of the exceptions it chains; the
    mended traceback."""
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        todo += (e.__cause__, e.__context__)
        if _direct is not None:
            try:
                e.__traceback__ = _mended(e.__traceback__)
            except Exception:
                pass
    return getattr(exc, "__traceback__", None)


def _mended(tb):
    head = tb
    prev = None
    while tb is not None:
        nxt = tb.tb_next
        if (
            tb.tb_frame.f_code is _call_impl
            and nxt is not None
            and nxt.tb_frame.f_code is _inner
            and _direct_alone(tb.tb_frame.f_locals.get("self"))
        ):
            tb = types.TracebackType(nxt.tb_next, tb.tb_frame, *_direct)
            if prev is None:
                head = tb
            else:
                prev.tb_next = tb
        prev = tb
        tb = tb.tb_next
    return head
