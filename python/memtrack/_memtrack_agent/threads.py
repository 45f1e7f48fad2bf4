"""Every thread's ops: torch's dispatch-mode stack and the compiled observer's RecordFunction
callback are per thread, so each `threading.Thread` started while recording (thread pools,
nn.DataParallel's replicas) gets the agent's observer as it starts (Thread._bootstrap_inner,
which every such thread runs, whatever its class overrides). Each is numbered (1, 2, …; 0 is
the main thread and any thread Python did not start: autograd's device threads work for the
thread whose backward they run) and named once in the stream; from then on the spool writers
take a lock and mark whose records follow (transport.go_threaded), and the module tracker
keeps a module stack per thread (modules.ThreadState).

What cannot be seen is said: threads already running when recording began (their ops are not
recorded) are listed in a `threads_before` message. A thread that outlives an in-process
recording keeps the (stopped) observer on its stack: it does nothing there.
"""

import itertools
import threading

from . import ops, state, transport
from .protocol import MSG_THREAD, MSG_THREADS_BEFORE

_count = itertools.count(1)
_get_ident = threading.get_ident
_on_start = []  # what else to set up in a new thread (the module tracker's stack)
_on_end = []


def _enter_observer():
    """Put the agent's observer on this (new) thread: the dispatch mode on its stack, or the
    compiled observer's callback."""
    native = ops._native
    if native is not None:
        native.attach()
        return
    from torch.utils._python_dispatch import _push_mode

    _push_mode(ops.mode)


def _leave_observer():
    """Take the dispatch mode off this ending thread's stack while its Python still runs. Left
    there, torch's thread-local destructor drops it after the thread's Python part has ended;
    if the interpreter is finalizing by then (the main thread joined it and exited), taking
    the GIL ends the thread inside that C++ destructor: std::terminate, SIGABRT. The compiled
    observer's callback holds no Python object."""
    if ops._native is None and ops.mode is not None:
        ops.leave_this_threads_stack()


def started(thread):
    """A threading.Thread starts running (in it): record it from here."""
    if not state.active or getattr(thread, "_memtrack_own", False):
        return None
    ident = _get_ident()
    n = next(_count)
    transport.go_threaded()
    transport.thread_numbers[ident] = n
    transport.message({"t": MSG_THREAD, "id": n, "name": str(getattr(thread, "name", "?"))})
    for fn in _on_start:
        fn(ident)
    _enter_observer()
    return ident


def ended(ident):
    transport.thread_numbers.pop(ident, None)
    for fn in _on_end:
        fn(ident)


def install():
    """Record the threads started from now on; say which ones run already."""
    cls = threading.Thread
    orig = cls._bootstrap_inner

    def _bootstrap_inner(self):
        ident = None
        try:
            ident = started(self)
        except Exception as e:
            transport.internal_error(e)
        try:
            orig(self)
        finally:
            if ident is not None:
                try:
                    _leave_observer()
                    ended(ident)
                except Exception:  # interpreter shutdown
                    pass

    cls._bootstrap_inner = _bootstrap_inner
    state.undo.append(lambda: setattr(cls, "_bootstrap_inner", orig))
    here = threading.current_thread()
    before = [
        t.name
        for t in threading.enumerate()
        if t is not here and not getattr(t, "_memtrack_own", False)
    ]
    if before:
        transport.message({"t": MSG_THREADS_BEFORE, "names": before})
