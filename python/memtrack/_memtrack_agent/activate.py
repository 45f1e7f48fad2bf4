"""Starting the agent in a process that imported torch: connect, choose the backend, say
hello, then install every part (op sampling, module, optimizer and compile hooks, the process's
exit handling, CUDA setup, --cycles) and start the observer of ops (the dispatch mode, or the
compiled observer).
"""

import os
import sys

from . import (
    compiled,
    cuda,
    cycles,
    dynamo,
    modules,
    native,
    ops,
    optim,
    process,
    state,
    subclass,
    threads,
    transport,
    versions,
    warnlocations,
)
from .importhook import after_import
from .protocol import FRAME_JSON, MSG_CUDA_UNAVAILABLE, MSG_HELLO, MSG_TORCH_UNSUPPORTED


def activate(torch):
    if state.started or os.environ.get("MEMTRACK_DISABLE") or state.is_launcher():
        return
    try:
        connected = transport.open_socket()
    except OSError as e:
        sys.stderr.write(f"memtrack: cannot reach the collector ({e}); not recording\n")
        return
    if not connected:
        return
    version = getattr(torch, "__version__", "?")
    why = versions.unsupported(version, os.environ.get("MEMTRACK_ANY_TORCH"))
    if why is not None:
        # a torch without the internals the agent calls would record half a run, or fail in
        # the middle of it: stop the program before it runs, as for --backend cuda below
        sys.stderr.write(f"memtrack: {why}\n")
        stop(
            {
                "t": MSG_TORCH_UNSUPPORTED,
                "pid": os.getpid(),
                "torch": version,
                "supported": versions.supported_range(),
            }
        )
    transport.open_spool(os.environ.get("MEMTRACK_SPOOL"))
    state.torch = torch
    want = os.environ.get("MEMTRACK_BACKEND", "auto")
    if want == "auto":
        backend = "cuda" if cuda.available(torch) else "cpu"
    else:
        backend = want
    state.backend = backend
    if backend == "cuda" and not cuda.available(torch):
        # an all-zero "cuda" recording would look like a result: stop the program instead
        sys.stderr.write(
            "memtrack: --backend cuda, but torch.cuda.is_available() is False in this process "
            f"(torch {getattr(torch, '__version__', '?')}); use --backend cpu or auto\n"
        )
        stop({"t": MSG_CUDA_UNAVAILABLE, "pid": os.getpid()})
    begin(torch, backend, os.environ.get("MEMTRACK_OBSERVER"))
    if backend == "estimate":  # `memtrack estimate`: as if on CUDA, with meta tensors
        # imported here only: its seven modules are a third of the agent's start-up in `record`
        from . import fake_cuda

        fake_cuda.install(torch)
    transport.start_flusher()
    process.install()
    if backend == "cuda":
        cuda.setup(torch)
    if os.environ.get("MEMTRACK_CYCLES"):
        try:
            cycles.watch(torch)
        except Exception as e:
            transport.internal_error(e)


def choose_observer(torch, backend, want):
    """The compiled observer's module, or None for the dispatch mode (docs/record.md,
    "Observers"). `want` (MEMTRACK_OBSERVER): "python"; "compiled"; "auto" or unset, the
    compiled observer on a process without CUDA (the cpu backend) and a torch it was checked
    on (versions.py), else the dispatch mode (with CUDA, the compiled observer would see CUDA
    tensors, and it has not run on a GPU yet). Where it cannot be built, the dispatch mode,
    and stderr says why."""
    want = want or "auto"
    if want == "python":
        return None
    if want == "auto" and (
        backend != "cpu" or not versions.compiled_observer_checked(torch) or cuda.available(torch)
    ):
        return None
    native_observer, why = native.load(torch)
    if native_observer is None:
        sys.stderr.write(
            f"memtrack: the compiled observer cannot be used ({why}); "
            "recording with the Python observer\n"
        )
    return native_observer


def begin(torch, backend, observer):
    """Say hello and install what samples ops and follows modules and optimizers, the observer
    of ops (choose_observer(..., observer)) started last; `memtrack record` and the
    in-process recording (inprocess.py) alike."""
    if int(os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") or 0) != 0:
        ops.min_alloc = 1
    native_observer = choose_observer(torch, backend, observer)
    observer = "python" if native_observer is None else "compiled"
    hello = {
        "t": MSG_HELLO,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": list(getattr(sys, "orig_argv", sys.argv)),
        "backend": backend,
        "torch": getattr(torch, "__version__", "?"),
        "python": sys.version.split()[0],
        "rank": state.int_env("RANK"),
        "world_size": state.int_env("WORLD_SIZE"),
        "local_rank": state.int_env("LOCAL_RANK"),
        "cycles": bool(os.environ.get("MEMTRACK_CYCLES")),
        "observer": observer,
        "attached": state.attached,
    }
    transport.message(hello)
    state.active = state.started = True
    transport.time_mark()

    mode = ops.install(torch, backend)
    modules.install(torch)
    optim.install(torch)
    compiled.install(torch)
    dynamo.mark_every_function(__package__)
    # the observer starts last, so that it sees none of the agent's own set-up
    if native_observer is not None:
        why = native.observe(torch, native_observer)
        if why is not None:  # (after the hello: the file says so in its agent errors)
            transport.internal_error(RuntimeError(f"the compiled observer: {why}"))
            native_observer = None
    if native_observer is None:
        # what only a dispatch mode needs: warnings from C++ ops keep the program's line, and
        # Tensor.as_subclass works on a torch where it raises under a mode
        try:
            warnlocations.keep_warning_locations()
        except Exception as e:
            transport.internal_error(e)
        subclass.install(torch)
        mode.__enter__()
    state.undo.append(ops.leave_dispatch_stack)
    threads.install()
    for name, then in (
        ("torch._inductor.output_code", compiled.watch_compiled_graphs),
        ("torch._inductor.codecache", compiled.watch_compiled_graphs_in_codecache),
        ("torch._dynamo.eval_frame", compiled.watch_dynamo_calls),
    ):
        waiting = after_import(name, then)
        if waiting is not None:
            state.undo.append(lambda w=waiting: w in sys.meta_path and sys.meta_path.remove(w))

def stop(msg):
    """Tell the collector why this process records nothing, and end it with exit code 2
    before the program runs (the only way the agent ends a program)."""
    try:
        transport.send_frame(FRAME_JSON, transport.encode_json(msg))
        transport.sock.close()
    finally:
        os._exit(2)
