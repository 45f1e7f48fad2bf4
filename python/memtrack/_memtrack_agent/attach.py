"""`memtrack attach PID`: the agent started inside a program that is already running, and
taken off again. `memtrack attach` queues a pending call in the program (src/record/attach/),
so `run` is called on the main thread, GIL held, between two bytecodes; it connects back to
the attach command's socket, checks that this process can be recorded, starts the recording
of `memtrack.record` (inprocess.start: same spool, same records) and returns; inside a
backward pass, the start waits for its end (autograd would undo it). A thread of its own then
waits on the socket: when the command says stop, or goes away (Ctrl-C, killed), it queues
the detach as a pending call, which runs on the main thread again (the dispatch mode is that
thread's) where the detach lasts, and takes every hook, mode and callback off (inprocess.stop), unregisters
its exit handler and forgets the agent's modules. A program that exits during the window
ends the recording in its exit handler. Nothing here raises into the program.

Each line sent on the socket is one JSON object: {"error": why} (nothing was installed),
{"started": facts}, then {"stopped": how}; with `--dump`, {"dumped": facts} alone. A call
that runs while `import torch` is under way first says {"waiting": what} and starts once the
import is done (within the command's --start-timeout).
"""

import json
import os
import socket
import sys
import threading
import time

from . import inprocess, state, transport, versions
from .protocol import GRAD, OPT, PARAM

_package = __name__.rpartition(".")[0]
_conn = [None]
_detached = [False]


def _send(msg):
    conn = _conn[0]
    if conn is None:
        return
    try:
        conn.sendall((json.dumps(msg) + "\n").encode())
    except OSError:
        pass


def _unmap(page):
    """The page `memtrack attach` wrote the line into: Python parsed it before running it."""
    try:
        import ctypes

        munmap = ctypes.CDLL(None, use_errno=True).munmap
        munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        munmap(page, 4096)
    except Exception:
        pass


def _refusal(config):
    """Why this process cannot be recorded now (nothing installed), or None."""
    for name, mod in list(sys.modules.items()):
        if name != _package and name.startswith("_memtrack_attach_") and "." not in name:
            if getattr(getattr(mod, "attach", None), "_conn", [None])[0] is not None:
                return "attached: another `memtrack attach` is recording this process now"
    outer = sys.modules.get("_memtrack_agent")
    if outer is not None and getattr(getattr(outer, "state", None), "active", False):
        return "recorded: this process runs under `memtrack record` already"
    wheel = sys.modules.get("memtrack")
    if wheel is not None and getattr(wheel, "_recording", [None])[0] is not None:
        return "recorded: a `memtrack.record` block is recording this process now"
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "nn"):
        return "no torch: this Python process has not imported torch"
    why = versions.unsupported(getattr(torch, "__version__", "?"), config.get("any_torch"))
    if why is not None:
        return f"unsupported torch: {why}"
    try:
        import ctypes

        ctypes.pythonapi.Py_AddPendingCall
    except Exception as e:
        return f"no ctypes here ({e}): the recording could not be taken off again"
    return None


def _held_bytes(torch):
    """What is allocated at the attach, where live objects still tell it: parameters,
    their gradients, optimizer state (each storage counted once); and those tensors, with
    their category, to count from the attach on (_count_held)."""
    import gc

    seen = set()
    out = {"parameters": 0, "gradients": 0, "optimizer_state": 0}
    tensors = []
    category = {"parameters": PARAM, "gradients": GRAD, "optimizer_state": OPT}

    def count(t, key):
        try:
            s = t.untyped_storage()
            ptr = (str(t.device), s.data_ptr())
            if ptr not in seen:
                seen.add(ptr)
                out[key] += s.nbytes()
                tensors.append((t, category[key]))
        except Exception:
            pass

    Parameter = torch.nn.Parameter
    Optimizer = torch.optim.Optimizer
    for o in gc.get_objects():
        kind = type(o)  # type(): no attribute of o read
        if issubclass(kind, Parameter):
            count(o, "parameters")
            if o.grad is not None:
                count(o.grad, "gradients")
        elif issubclass(kind, Optimizer):
            for st in getattr(o, "state", {}).values():
                for v in st.values() if isinstance(st, dict) else ():
                    if isinstance(v, torch.Tensor):
                        count(v, "optimizer_state")
    return out, tensors


def _count_held(tensors):
    """Count what was held at the attach from now, before the first op: else the first op that
    touches a tensor made long before (an in-place op on Adam's state, a layer's weight) is
    credited with it. Never raises."""
    from . import ops

    for t, cat in tensors:
        try:
            ops.track_as(t, cat)
        except Exception as e:
            transport.internal_error(e)


def run(config_path, page):
    """The pending call's body: start recording, or say why not. Never raises."""
    if page:
        _unmap(page)
    try:
        with open(config_path, "rb") as f:
            config = json.loads(f.read())
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(5)
        conn.connect(config["socket"])
    except Exception:
        return  # the command gave up waiting and removed its socket: nothing to do
    _conn[0] = conn
    if _torch_importing():
        # the call ran inside `import torch` (between two of its bytecodes): start once the
        # import is done, within the command's start timeout
        patience = float(config.get("start_timeout") or 10.0)
        _send({"waiting": "torch is being imported"})
        call = _OnMainThread(
            lambda: not _torch_importing(),
            lambda: _begin(config),
            lambda: _refuse(
                f"torch was still being imported {patience:g} s later (--start-timeout)"
            ),
            patience=patience,
        )
        transport.start_own_thread(call.wait, "memtrack-attach")
        return
    _begin(config)


def _torch_importing():
    """Whether `import torch` is under way: the module is in sys.modules, its code running
    (importlib marks its spec while it does)."""
    torch = sys.modules.get("torch")
    spec = getattr(torch, "__spec__", None)
    return torch is not None and bool(getattr(spec, "_initializing", False))


def _begin(config):
    """Start recording or dump (outside backward), or say why not, on the main thread."""
    why = _refusal(config)
    if why is not None:
        _refuse(why)
    elif config.get("dump"):
        _dump(config["dump"])
    elif not _in_backward():
        _start(config)
    else:
        # a mode pushed inside backward would be gone at its end: start after it
        call = _OnMainThread(
            lambda: not _in_backward(),
            lambda: _start(config),
            lambda: _refuse("the program stayed inside one backward pass for 60 s"),
            patience=60.0,
        )
        transport.start_own_thread(call.wait, "memtrack-attach")


def _refuse(why):
    _send({"error": why})
    _close()
    _forget()


def _dump(prefix):
    """`attach --dump`: an allocator snapshot and the allocator's counters, now; nothing is
    installed."""
    from . import cuda

    torch = sys.modules["torch"]
    try:
        if not torch.cuda.is_initialized():
            _refuse("no allocator to dump: this process has not initialised CUDA")
            return
        path = cuda.snapshot_path(prefix, "dump")
        torch.cuda.memory._dump_snapshot(path)
        stats = dict(torch.cuda.memory_stats())
        history = cuda.history_enabled(torch)
    except BaseException as e:
        _refuse(f"dumping: {type(e).__name__}: {e}")
        return
    _send({"dumped": {"snapshot": path, "memory_stats": stats, "history": history}})
    _close()
    _forget()


def _start(config):
    """Start the recording (on the main thread, outside backward) and the thread that waits
    for the stop; or say why not."""
    try:
        torch = sys.modules["torch"]
        held, tensors = _held_bytes(torch)
        state.attached = {"unix_time": time.time(), "held": held}
        state.snapshot = config.get("snapshot")
        inprocess.start(torch, config["spool"], config["backend"], config["observer"])
        _count_held(tensors)
        del tensors
    except BaseException as e:
        _refuse(f"starting the recording: {type(e).__name__}: {e}")
        return
    import atexit

    atexit.register(_at_exit)
    _send(
        {
            "started": {
                "unix_time": state.attached["unix_time"],
                "held": held,
                "torch": getattr(torch, "__version__", "?"),
                "backend": state.backend,
                "python": sys.version.split()[0],
            }
        }
    )
    _conn[0].settimeout(None)
    transport.start_own_thread(_wait_for_stop, "memtrack-attach")


def _forget():
    """This copy of the agent out of sys.modules: the process is left with none of it."""
    for name in [m for m in sys.modules if m == _package or m.startswith(_package + ".")]:
        sys.modules.pop(name, None)


def _close():
    conn, _conn[0] = _conn[0], None
    try:
        if conn is not None:
            conn.close()
    except OSError:
        pass


def _wait_for_stop():
    """The socket says stop, or closes (the command is gone): detach on the main thread."""
    conn = _conn[0]
    try:
        while conn is not None:
            data = conn.recv(64)
            if not data or b"stop" in data:
                break
    except OSError:
        pass
    # taken off at some bytecodes, the dispatch mode comes back by itself: inside its own
    # handler (torch took it off its stack and pushes it back on return), and inside a
    # backward pass (autograd puts the thread's dispatch stack back as it was when backward
    # began); so the detach waits for a bytecode outside both (5 s at most)
    detaching = lambda: detach("detached")  # noqa: E731
    _OnMainThread(lambda: not _mode_would_come_back(), detaching, detaching, 5.0).wait()


class _OnMainThread:
    """`fn` run on the main thread at a bytecode where `ready()` holds, or `late` there once
    `patience` seconds have passed. A thread calls `wait`, which queues a pending call (run
    by Python between two bytecodes of the main thread, GIL held) and, each time it
    declines, asks again 2 ms later, so the main thread never spins on it."""

    def __init__(self, ready, fn, late, patience):
        import ctypes

        self.ready, self.fn, self.late = ready, fn, late
        self.deadline = time.monotonic() + patience
        self.done = False
        self.ran = threading.Event()
        self.callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(self._pending)

    def _pending(self, _arg):
        try:
            if self.ready():
                self.done = True
                self.fn()
            elif time.monotonic() >= self.deadline:
                self.done = True
                self.late()
        except BaseException:
            pass
        finally:
            self.ran.set()
        return 0

    def wait(self):
        while not self.done:
            self.ran.clear()
            if not _add_pending_call(self.callback):
                return
            self.ran.wait()
            if not self.done:
                time.sleep(0.002)


def _add_pending_call(callback):
    """Queue `callback` to run on the main thread at its next bytecode: whether it was
    queued. Never raises."""
    try:
        import ctypes

        add = ctypes.pythonapi.Py_AddPendingCall
        add.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        add.restype = ctypes.c_int
        # the queue holds 32 calls; a full one empties at the next bytecode
        for _ in range(500):
            if add(ctypes.cast(callback, ctypes.c_void_p), None) == 0:
                return True
            time.sleep(0.01)
    except Exception as e:
        sys.stderr.write(f"memtrack: cannot queue a call on the main thread: {e!r}\n")
    return False


def _in_backward():
    """Whether a backward pass runs on this thread: autograd restores the thread's dispatch
    stack and profiler callbacks as they were when it began."""
    try:
        return sys.modules["torch"]._C._current_graph_task_id() != -1
    except Exception:
        return False


def _mode_would_come_back():
    """Whether the agent's mode (or the compiled observer's thread-local callback), taken off
    now, would be put back: a backward pass runs on this thread, or the mode's own handler
    runs (the mode is installed but off the stack)."""
    try:
        from . import ops

        if ops.mode is None:
            return False
        if _in_backward():
            return True
        if ops._native is not None:
            return False  # the compiled observer: the mode never went on the stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        return all(m is not ops.mode for m in _get_current_dispatch_mode_stack())
    except Exception:
        return False


def _at_exit():
    detach("exit")


def detach(how):
    """Take the recording off (on the main thread): the goodbye, every hook off, the spool
    closed, the exit handler unregistered, the agent's modules forgotten. Never raises."""
    if _detached[0]:
        return
    _detached[0] = True
    try:
        inprocess.stop(None, how)
    except BaseException as e:
        sys.stderr.write(f"memtrack: detaching: {e!r}\n")
    try:
        import atexit

        atexit.unregister(_at_exit)
    except Exception:
        pass
    _forget()
    _send({"stopped": how, "unix_time": time.time()})
    _close()
