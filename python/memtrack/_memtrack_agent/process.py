"""How a recording process ends, and forks: the chained excepthook, SIGTERM, atexit and the
goodbye (`finish`), a forked child switching the agent off.
"""

import os
import sys

from . import compiled, cuda, cycles, ops, state, transport
from .importhook import after_import
from .protocol import MSG_BYE, MSG_EXCEPTION, MSG_SIGNAL
from .transport import message, time_mark

_finished = [False]


def install():
    """Fork handler, atexit, excepthook and SIGTERM, for a process that records."""
    os.register_at_fork(after_in_child=after_fork_in_child)
    import atexit

    atexit.register(at_exit)
    chain_excepthook()
    install_sigterm()


def after_fork_in_child():
    """A forked child (a DataLoader worker) must not write into the parent's stream: drop the
    socket (without shutting it down: the parent still uses it) and take the mode off the
    stack, so the child's ops cost nothing and pile up nowhere."""
    state.active = False
    transport.drop_socket()
    cycles.stop()  # nothing to report to: no collections kept for it either
    try:
        ops.leave_dispatch_stack()
    except Exception:
        pass
    # the spool's pages are shared with the parent: never write there again
    transport.forget_spool()


def _send_exception(tp, value, tb):
    """The program's uncaught exception, for its file."""
    try:
        import traceback

        text = "".join(traceback.format_exception(tp, value, tb))
        oom = tp.__name__ == "OutOfMemoryError" or isinstance(value, MemoryError)
        msg = {"t": MSG_EXCEPTION, "type": tp.__name__, "text": text, "oom": oom}
        where = _raised_at(tb)
        if where is not None:
            msg["file"], msg["line"] = where
        message(msg)
    except Exception:
        pass


def chain_excepthook():
    prev = sys.excepthook

    def hook(tp, value, tb):
        _send_exception(tp, value, tb)
        prev(tp, value, tb)

    sys.excepthook = hook
    after_import("torch.multiprocessing.spawn", _watch_spawned)


def _watch_spawned(spawn):
    """An mp.spawn worker's exception never reaches the excepthook: torch's `_wrap` catches it,
    hands its text to the parent and exits 1, raising SystemExit inside its `except`. Read it
    from there (outside `_wrap`, so the traceback torch prints has no frame of the agent's)."""
    inner = getattr(spawn, "_wrap", None)
    if inner is None:
        return

    def _wrap(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except SystemExit as e:
            cause = e.__context__
            if e.code and isinstance(cause, Exception):
                _send_exception(type(cause), cause, cause.__traceback__)
            raise

    # pickled by name for the workers: the name of the function it stands for
    _wrap.__module__, _wrap.__qualname__, _wrap.__wrapped__ = spawn.__name__, "_wrap", inner
    spawn._wrap = _wrap


def _raised_at(tb):
    """(file, line) of the innermost frame outside torch and the agent: the program's line
    (or its library's) that raised."""
    at = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if state.program_file(name):
            at = (name, tb.tb_lineno)
        tb = tb.tb_next
    return at


def install_sigterm():
    """Ship what is buffered before SIGTERM's default death. Not under torchrun: its agent
    SIGTERMs workers that may sit in a collective, where a Python-level handler would wait."""
    import signal

    if "TORCHELASTIC_RUN_ID" in os.environ:
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, _on_term)
    except (ValueError, OSError):
        pass  # not the main thread


def _on_term(signum, frame):
    import signal

    try:
        message({"t": MSG_SIGNAL, "signal": signum})
        finish("signal")
    except Exception:
        pass  # the signal's death below is the program's ending, whatever the agent did
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def finish(how):
    """The goodbye: how the process ended, what compile did, the allocator's counters."""
    # not `sock is None`: with the collector gone the spool still takes the goodbye
    if _finished[0] or not state.active:
        return
    _finished[0] = True
    cycles.stop()
    time_mark()
    msg = {"t": MSG_BYE, "how": how}
    counters = compiled.counters()
    if counters:
        msg["compile"] = counters
    torch = state.torch
    try:
        if state.backend == "cuda" and torch.cuda.is_initialized():
            msg["memory_stats"] = dict(torch.cuda.memory_stats())
            cuda.send_device(torch)  # the device the program ended on (after set_device)
            cuda.write_snapshot("detach" if how == "detached" else "exit")
    except Exception:
        pass
    state.active = False
    message(msg)
    transport.close_socket()


def at_exit():
    try:
        finish("exit")
    except Exception:
        pass  # an atexit handler that raised would print a traceback after the program's end

