# memtrack's recording agent. `memtrack record` writes this file (embedded in the binary) into a
# private folder; sitecustomize.py calls install(), which arms a one-shot import hook; when the
# program imports torch, _activate() connects to the collector's Unix socket and starts a
# TorchDispatchMode plus global module and optimizer hooks.
#
# What runs per operator is kept to a minimum: the op's outputs' storages are looked up in a
# dict, new ones get a weakref whose callback reports the free, and one int (four on CUDA)
# is written into a shared memory-mapped spool file (see _ap). Op names, the current module,
# MemTracker's category totals and peaks are all worked out by the collector from this stream
# (src/record/replay.rs), so no strings are built and no snapshots are copied in Python. The
# socket only says the process is alive (and, for processes that never recorded, why).
#
# The wire format is documented in docs/record.md and must match src/record/replay.rs.
import os
import struct
from array import array as _array
import sys
import threading

# ---- record codes (int64 stream); an op is any value >= 0: (func id << 2) | mutable << 1 | bw
ADD, DEL, REF, SIZE, PUSH, POP, RESET, MOD, SNAP, INPUT, OUTPUT, ITER, MARK, OPT_BEGIN, OPT_END = (
    range(-1, -16, -1)
)
CYCLE, TIME, JSON = -16, -17, -18
# MemTracker's categories (_MemRefType), in its order
PARAM, BUFFER, GRAD, ACT, TEMP, OPT, OTH = range(7)
# MemTracker's module states (_ModState)
PRE_FW, POST_FW, PEAK_FW, PRE_BW, POST_BW, PEAK_BW, PRE_FW_AC, POST_FW_AC = range(8)
# frame kinds
FRAME_ALIVE, FRAME_JSON, FRAME_RECORDS = 0, 1, 2
FLUSH_SECONDS = 0.05

_sock = None
_send_lock = threading.Lock()
_active = False
_started = False  # the agent ran in this process (even if it has stopped since)
_torch = None
_backend = "cpu"

_known = {}  # id(storage) -> [category, bytes, weakref]
_fids = {}  # OpOverload -> code (fid << 2 | mutable << 1), -1 for skipped ops
_names = {}  # module fqn -> name id
_in_opt = False
_in_ac = False
_ac_mod = None
_min_alloc = 512
_mode = None
_track_as = None


# ---------------------------------------------------------------------------------------------
# bootstrap


def install():
    """Arm the import hook (from sitecustomize); torch itself is imported by the program."""
    if "torch" in sys.modules:
        _activate(sys.modules["torch"])
        return
    sys.meta_path.insert(0, _AfterImport("torch", _activate))
    import atexit

    atexit.register(_exit_without_torch)


class _AfterImport:
    """One-shot meta path finder: lets the normal machinery find module `name`, then calls
    `then(module)` right after the module's code has run."""

    def __init__(self, name, then):
        self.name = name
        self.then = then

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        orig = loader.exec_module
        then = self.then

        def exec_module(module):
            orig(module)
            try:
                then(module)
            except Exception as e:  # never break the user's program
                sys.stderr.write(f"memtrack: after importing {name}: {e!r}\n")

        loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        pass


def _after_import(name, then):
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


def _is_launcher():
    """torchrun's own process imports torch too; only its workers are recorded."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    for i, a in enumerate(argv):
        if a == "-m" and i + 1 < len(argv) and argv[i + 1] in (
            "torch.distributed.run",
            "torch.distributed.launch",
        ):
            return True
    return bool(argv) and os.path.basename(sys.argv[0] or "") == "torchrun"


def _connect():
    import socket

    path = os.environ.get("MEMTRACK_SOCKET")
    if not path:
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def _send_frame(kind, payload):
    _sock.sendall(struct.pack("<IB", len(payload), kind) + payload)


def _json(msg):
    import json

    return json.dumps(msg, separators=(",", ":")).encode()


def _exit_without_torch():
    """At exit of a process that never started the agent: tell the collector why."""
    if _started or _is_launcher() or os.environ.get("MEMTRACK_DISABLE"):
        return
    try:
        import importlib.util

        has_torch = importlib.util.find_spec("torch") is not None
    except Exception:
        has_torch = False
    global _sock
    try:
        _sock = _connect()
        if _sock is None:
            return
        msg = {
            "t": "no_torch" if not has_torch else "torch_not_imported",
            "pid": os.getpid(),
            "python": sys.executable,
            "argv": list(getattr(sys, "orig_argv", sys.argv)),
        }
        _send_frame(FRAME_JSON, _json(msg))
        _sock.close()
    except Exception:
        pass


# ---------------------------------------------------------------------------------------------
# transport


# The record stream goes into a spool: files in the collector's journal folder
# (MEMTRACK_SPOOL), mapped shared, so every record is in the page cache the moment it is
# written and survives the process's death (SIGKILL, the OOM killer) with no syscall per op.
# A segment is int64 slots: slot 0 holds the next free slot (the reader takes slots 1 up to
# it), records follow; a record never straddles two segments. Messages (JSON) are records
# too (JSON, byte length, the bytes in slots), so names land before the records using them.
SPOOL_SLOTS = 1 << 21  # 16 MiB a segment, sparse: only pages written take room
_spool = [1, 0, None]  # next free slot, slots in this segment, memoryview of the slots
_spool_state = {"pid": None, "segment": 0, "dir": None, "mm": []}


def _open_segment(need):
    """A fresh segment for a record of `need` slots; False where nothing may be written (a
    forked child, no spool, or the file cannot be made): the record is dropped."""
    import mmap

    st = _spool_state
    if st["dir"] is None or st["pid"] != os.getpid():
        return False
    slots = max(SPOOL_SLOTS, need + 1)
    path = os.path.join(st["dir"], f"spool-{st['pid']}-{st['segment']:04d}.bin")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, slots * 8)
            mm = mmap.mmap(fd, slots * 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    except OSError as e:
        st["dir"] = None
        sys.stderr.write(f"memtrack: cannot write {path} ({e}); recording stops here\n")
        return False
    st["segment"] += 1
    st["mm"].append(mm)  # kept mapped: the pages are the data
    mv = memoryview(mm).cast("q")
    mv[0] = 1
    _spool[2] = mv
    _spool[0] = 1
    _spool[1] = slots
    return True


def _ap(v):
    """Append a one-slot record (an op on CPU, a marker without arguments)."""
    sp = _spool
    p = sp[0]
    if p >= sp[1]:
        if not _open_segment(1):
            return
        p = 1
    sp[0] = p + 1
    mv = sp[2]
    mv[p] = v
    mv[0] = p + 1  # published after the record: the reader never sees half of one


def _ext(rec):
    """Append a record of several slots."""
    sp = _spool
    p = sp[0]
    q = p + len(rec)
    if q > sp[1]:
        if not _open_segment(len(rec)):
            return
        p = 1
        q = 1 + len(rec)
    sp[0] = q  # claimed first: another thread writing now goes after it
    mv = sp[2]
    for x in rec:
        mv[p] = x
        p += 1
    mv[0] = q


def _write_json(msg):
    b = _json(msg)
    n = len(b)
    b += b"\0" * (-n % 8)
    words = _array("q")
    words.frombytes(b)
    if sys.byteorder != "little":
        words.byteswap()
    _ext((JSON, n, *words))


def _stop_sending():
    global _sock, _active
    _active = False
    s, _sock = _sock, None
    try:
        if s is not None:
            s.close()
    except Exception:
        pass


_message = _write_json  # a message (JSON) in the stream, in order with the records


def _flusher():
    global _sock
    import time

    # A time mark every 50 ms: where the op stream was at a moment of CLOCK_MONOTONIC, so
    # the collector can place its driver-level memory samples (taken by time) among the ops.
    # An empty frame on the socket tells the collector the process is alive.
    mono = time.clock_gettime_ns
    clock = time.CLOCK_MONOTONIC
    while _sock is not None:
        time.sleep(FLUSH_SECONDS)
        _ext((TIME, mono(clock)))
        try:
            with _send_lock:
                if _sock is not None:
                    _send_frame(FRAME_ALIVE, b"")
        except Exception:
            # the collector is gone (killed): keep recording into the spool, which
            # `memtrack record --recover` reads; only the socket goes
            s, _sock = _sock, None
            try:
                s.close()
            except Exception:
                pass


# ---------------------------------------------------------------------------------------------
# activation


def _activate(torch):
    global _torch, _backend, _sock, _active, _min_alloc, _started
    if _started or os.environ.get("MEMTRACK_DISABLE") or _is_launcher():
        return
    try:
        _sock = _connect()
    except OSError as e:
        sys.stderr.write(f"memtrack: cannot reach the collector ({e}); not recording\n")
        return
    if _sock is None:
        return
    _spool_state["dir"] = os.environ.get("MEMTRACK_SPOOL")
    _spool_state["pid"] = os.getpid()
    _torch = torch
    want = os.environ.get("MEMTRACK_BACKEND", "auto")
    if want == "auto":
        _backend = "cuda" if _cuda_available(torch) else "cpu"
    else:
        _backend = want
    if _backend == "cuda" and not _cuda_available(torch):
        # an all-zero "cuda" recording would look like a result: stop the program instead
        sys.stderr.write(
            "memtrack: --backend cuda, but torch.cuda.is_available() is False in this process "
            f"(torch {getattr(torch, '__version__', '?')}); use --backend cpu or auto\n"
        )
        try:
            _send_frame(FRAME_JSON, _json({"t": "cuda_unavailable", "pid": os.getpid()}))
            _sock.close()
        finally:
            os._exit(2)
    if int(os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") or 0) != 0:
        _min_alloc = 1

    hello = {
        "t": "hello",
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": list(getattr(sys, "orig_argv", sys.argv)),
        "backend": _backend,
        "torch": getattr(torch, "__version__", "?"),
        "python": sys.version.split()[0],
        "rank": _int_env("RANK"),
        "world_size": _int_env("WORLD_SIZE"),
        "local_rank": _int_env("LOCAL_RANK"),
        "cycles": bool(os.environ.get("MEMTRACK_CYCLES")),
    }
    _message(hello)
    _active = _started = True
    _time_mark()

    _install_hooks(torch)
    _after_import("torch._inductor.output_code", _watch_compiled_graphs)
    threading.Thread(target=_flusher, name="memtrack-flush", daemon=True).start()
    os.register_at_fork(after_in_child=_after_fork_in_child)
    import atexit

    atexit.register(_at_exit)
    _chain_excepthook()
    _install_sigterm()
    if _backend == "cuda":
        _setup_cuda(torch)
    if os.environ.get("MEMTRACK_CYCLES"):
        try:
            _watch_cycles(torch)
        except Exception as e:
            _internal_error(e)


def _cuda_available(torch):
    """memtrack's own probe: whatever torch warns here (a driver too old, CUDA init failing)
    is the program's to see if it asks, not a stray message at `import torch`."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(torch.cuda.is_available())
    except Exception:
        return False


def _time_mark():
    import time

    _ext((TIME, time.clock_gettime_ns(time.CLOCK_MONOTONIC)))


def _int_env(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _after_fork_in_child():
    """A forked child (a DataLoader worker) must not write into the parent's stream: drop the
    socket (without shutting it down: the parent still uses it) and take the mode off the
    stack, so the child's ops cost nothing and pile up nowhere."""
    global _sock, _active
    _active = False
    _sock = None
    _cycles_state["on"] = False  # nothing to report to: no collections kept for it either
    try:
        C = _torch._C
        others = []
        while C._len_torch_dispatch_stack() > 0:
            m = C._pop_torch_dispatch_stack()
            if m is not _mode:
                others.append(m)
        for m in reversed(others):
            C._push_on_torch_dispatch_stack(m)
    except Exception:
        pass
    # the spool's pages are shared with the parent: never write there again
    _spool[1] = 0
    _spool[2] = None


# ---------------------------------------------------------------------------------------------
# the dispatch mode: per-op samples and storage accounting


def _install_hooks(torch):
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    Tensor = torch.Tensor
    gtid = torch._C._current_graph_task_id
    wref = weakref.ref
    known = _known
    known_get = known.get
    fids = _fids
    fids_get = fids.get
    ap = _ap
    ext = _ext
    cuda = _backend == "cuda"

    def on_del(k):
        try:
            if known.pop(k, None) is not None:
                ext((DEL, k))
        except Exception:  # interpreter shutdown
            pass

    def new_storage(st, k, t, bw):
        cat = OPT if _in_opt else (TEMP if bw and not _in_ac else ACT)
        nb = st.nbytes()
        dev = t.get_device()
        if dev >= 0:
            nb = -(-nb // _min_alloc) * _min_alloc
        known[k] = [cat, nb, wref(st, lambda w, k=k: on_del(k))]
        ext((ADD, k, cat, dev, nb))

    def resized(st, k, e, t):
        nb = st.nbytes()
        if t.get_device() >= 0:
            nb = -(-nb // _min_alloc) * _min_alloc
        if nb != e[1]:
            e[1] = nb
            ext((SIZE, k, nb))

    def other_output(out, code, bw):
        # tuples and lists of tensors, and tensor subclasses, the slow way
        if isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, Tensor):
                    track(t, code, bw)
        elif isinstance(out, Tensor):
            track(out, code, bw)

    def track(t, code, bw):
        for st in _storages(t):
            k = id(st)
            e = known_get(k)
            if e is None:
                new_storage(st, k, t, bw)
            elif code & 2:
                resized(st, k, e, t)

    stats_reader = _cuda_stats_reader(torch) if cuda else None
    # TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo, a Python wrapper
    # that costs about 1 us per op. Marking the code object to skip (recursively) does the
    # same for dynamo without the wrapper; where that API is missing, keep the wrapper.
    skip_code = _dynamo_skipper()

    class MemtrackMode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):
            return skip_code is None

        # torch.compile skips every frame while a mode without this is on the stack (the
        # program would silently run eager); with it, dynamo switches the mode off while it
        # compiles and back on while compiled code runs, so the ops compiled code still
        # dispatches (extern kernels) are sampled and each compiled graph call is sampled
        # by _watch_compiled_graphs.
        @classmethod
        def ignore_compile_internals(cls):
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **kwargs) if kwargs else func(*args)
            code = fids_get(func)
            if code is None:
                code = _new_func(func)
            if code < 0:
                return out
            bw = gtid() != -1
            if type(out) is Tensor:
                try:
                    st = out.untyped_storage()
                    k = id(st)
                    e = known_get(k)
                    if e is None:
                        new_storage(st, k, out, bw)
                    elif code & 2:
                        resized(st, k, e, out)
                except Exception:
                    pass
            elif out is not None:
                try:
                    other_output(out, code, bw)
                except Exception:
                    pass
            if cuda:
                ext((code | bw,) + stats_reader())
            else:
                ap(code | bw)
            return out

    global _mode, _track_as
    if skip_code is not None:
        for f in (MemtrackMode.__torch_dispatch__, new_storage, resized, other_output, track):
            skip_code(f.__code__)
        skip_code(on_del.__code__)
    _mode = MemtrackMode()

    def track_as(t, cat):
        """MemTracker's _update_and_maybe_create_winfos: (re)categorise t's storages; bytes."""
        total = 0
        for st in _storages(t):
            k = id(st)
            e = known_get(k)
            if e is None:
                nb = st.nbytes()
                dev = t.get_device()
                if dev >= 0:
                    nb = -(-nb // _min_alloc) * _min_alloc
                known[k] = e = [cat, nb, wref(st, lambda w, k=k: on_del(k))]
                ext((ADD, k, cat, dev, nb))
            elif e[0] != cat:
                e[0] = cat
                ext((REF, k, cat))
            total += e[1]
        return total

    _track_as = track_as

    def after_compiled_graph(out):
        """A compiled graph ran. Its outputs (results and, in forward, what it saves for
        backward) were allocated inside generated code the mode never sees: account them
        now, then take one sample for the whole call."""
        if not _active:
            return
        bw = gtid() != -1
        if isinstance(out, (list, tuple)):
            for t in out:
                if isinstance(t, Tensor):
                    try:
                        track(t, 0, bw)
                    except Exception:
                        pass
        if _sweep_compiled_optimizers is not None:
            _sweep_compiled_optimizers()
        code = fids_get(COMPILED_GRAPH)
        if code is None:
            code = _intern(COMPILED_GRAPH, COMPILED_GRAPH, False)
        if cuda:
            ext((code | bw,) + stats_reader())
        else:
            ap(code | bw)

    global _after_compiled_graph
    _after_compiled_graph = after_compiled_graph
    _install_module_hooks(torch)
    _install_optimizer_hooks(torch)
    _install_resize(torch)
    _mode.__enter__()


_after_compiled_graph = None
_sweep_compiled_optimizers = None


def _watch_compiled_graphs(output_code):
    """Sample after every call of an Inductor-compiled graph (forward, backward, inference):
    the granularity at which compiled regions are measured."""
    cls = getattr(output_code, "CompiledFxGraph", None)
    if cls is None:
        _message({"t": "agent_error", "text": "torch._inductor: no CompiledFxGraph"})
        return
    orig = cls.__call__

    def __call__(self, inputs):
        out = orig(self, inputs)
        if _active:
            _after_compiled_graph(out)
        return out

    cls.__call__ = __call__


def _dynamo_skipper():
    """A function marking a code object (and what it calls) as never traced by dynamo."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
        return lambda code: set_code_exec_strategy(code, strategy)
    except Exception:
        return None


def _storages(t):
    """The untyped storages behind a tensor, through traceable wrapper subclasses."""
    if type(t) is _torch.Tensor or type(t) is _torch.nn.Parameter:
        return (t.untyped_storage(),)
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    todo, out = [t], []
    while todo:
        x = todo.pop()
        if is_traceable_wrapper_subclass(x):
            attrs, _ = x.__tensor_flatten__()
            todo.extend(
                getattr(x, a) for a in attrs if isinstance(getattr(x, a), _torch.Tensor)
            )
        elif hasattr(x, "untyped_storage"):
            try:
                st = x.untyped_storage()
            except Exception:
                continue
            if all(st is not o for o in out):
                out.append(st)
    return out


_op_names = []


def _new_func(func):
    """Intern an op: its id goes in the stream, its name once in a message."""
    torch = _torch
    if func is torch.ops.aten.detach.default:
        _fids[func] = -1  # MemoryTracker skips detach
        return -1
    try:
        mutable = bool(func._schema.is_mutable)
    except Exception:
        mutable = True
    return _intern(func, getattr(func, "__name__", str(func)), mutable)


def _intern(key, name, mutable):
    fid = len(_op_names)
    _op_names.append(name)
    code = (fid << 2) | (2 if mutable else 0)
    _fids[key] = code
    _write_json({"t": "op", "id": fid, "name": name})
    return code


# The pseudo-op sampled after each call of a graph torch.compile compiled (its name in files)
COMPILED_GRAPH = "compiled_graph"


def _cuda_stats_reader(torch):
    """One allocator call per op (MemoryTracker makes three, each building the whole dict)."""
    memstats = torch._C._cuda_memoryStats
    getdev = torch._C._cuda_getDevice
    cuda_mod = torch.cuda
    zero = (0, 0, 0)

    def read():
        if not cuda_mod._initialized:
            return zero
        s = memstats(getdev())
        return (
            s["allocated_bytes"]["all"]["current"],
            s["active_bytes"]["all"]["current"],
            s["reserved_bytes"]["all"]["current"],
        )

    return read


# ---------------------------------------------------------------------------------------------
# modules: ModTracker's bookkeeping (names, parents, backward hooks) and MemTracker's states


class _ModInfo:
    __slots__ = ("obj_id", "mk", "name", "name_id", "seen")

    def __init__(self, obj_id, mk, name):
        self.obj_id = obj_id
        self.mk = mk
        self.name = name
        self.name_id = _name_id(name)
        self.seen = False


_mod_count = [0]


def _name_id(name):
    i = _names.get(name)
    if i is None:
        i = _names[name] = len(_names)
        _write_json({"t": "name", "id": i, "name": name})
    return i


def _info(mod):
    d = mod.__dict__
    info = d.get("_memtrack_info")
    if info is None or info.obj_id != id(mod):
        _mod_count[0] += 1
        info = d["_memtrack_info"] = _ModInfo(id(mod), _mod_count[0], type(_wrapped(mod)).__name__)
    return info


def _wrapped(mod):
    """torch.compile(module) returns an OptimizedModule around it: named as what it wraps."""
    if type(mod).__name__ == "OptimizedModule":
        return mod.__dict__.get("_modules", {}).get("_orig_mod") or mod
    return mod


def _set_name(mod, name):
    info = _info(mod)
    if info.name != name:
        info.name = name
        info.name_id = _name_id(name)
    return info


def _mod_info(mod):
    """ModTracker._get_mod_name: an unknown module is named by its class; the first time a
    module is seen, its children are named under it."""
    info = _info(mod)
    if not info.seen:
        wrapper = _wrapped(mod) is not mod
        for cname, sub in mod.named_children():
            # the wrapped module is the same module to the user: MLP.fc1, not MLP._orig_mod.fc1
            _set_name(sub, info.name if wrapper and cname == "_orig_mod" else f"{info.name}.{cname}")
            _mod_info(sub)
        info.seen = True
    return info


def _install_module_hooks(torch):
    import weakref

    from torch.autograd.graph import register_multi_grad_hook
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    from torch.utils._pytree import tree_flatten

    Tensor = torch.Tensor
    gtid = torch._C._current_graph_task_id
    engine = torch.autograd.Variable._execution_engine
    ap, ext = _ap, _ext
    parents = {}  # name -> active count (ModTracker.parents without "Global")
    tracked = {}  # mk -> True: modules with stats in this iteration (MemTracker.memory_tracking)
    state = {"root": None, "has_callback": False}
    post_bw_to_enqueue = []
    hooked_params = {}  # id(param) -> weakref: hooks installed once per parameter

    def flat(x):
        if isinstance(x, Tensor):
            return (x,)
        if type(x) is tuple or type(x) is list:
            for a in x:
                if isinstance(a, (tuple, list, dict)):
                    break
            else:
                return x
        return tree_flatten(x)[0]

    def io_mem(x):
        total = 0
        for t in flat(x):
            if isinstance(t, Tensor):
                try:
                    for st in _storages(t):
                        e = _known.get(id(st))
                        if e is not None:
                            total += e[1]
                except Exception:
                    pass
        return total

    def grad_tensors(x):
        return [a for a in flat(x) if isinstance(a, Tensor) and a.requires_grad]

    def add_parent(info, bw_push):
        name = info.name
        if name not in parents:
            parents[name] = 1
            ext((PUSH, info.name_id, bw_push))
        else:
            parents[name] += 1

    def remove_parent(info):
        name = info.name
        c = parents.get(name)
        if c is None:
            return
        if c <= 1:
            del parents[name]
            ext((POP, info.name_id))
        else:
            parents[name] = c - 1

    def engine_callback():
        parents.clear()
        state["has_callback"] = False
        ap(RESET)

    def maybe_set_engine_callback():
        if state["has_callback"]:
            return
        for cb in reversed(post_bw_to_enqueue):
            engine.queue_callback(cb)
        post_bw_to_enqueue.clear()
        engine.queue_callback(engine_callback)
        state["has_callback"] = True

    # MemTracker's param/grad hooks
    def grad_hook(grad):
        if _active and grad is not None:
            _track_as(grad, GRAD)

    def post_acc_hook(p):
        if _active and p.grad is not None:
            _track_as(p.grad, GRAD)

    def track_params_and_buffers(mod):
        pm = 0
        for p in mod.parameters():
            pm += _track_as(p, PARAM)
            if p.grad is not None:
                _track_as(p.grad, GRAD)
            pid = id(p)
            h = hooked_params.get(pid)
            if h is None or h() is not p:
                try:
                    p.register_hook(grad_hook)
                    p.register_post_accumulate_grad_hook(post_acc_hook)
                except RuntimeError:
                    pass  # a parameter that does not require grad
                hooked_params[pid] = weakref.ref(p)
        bm = 0
        for b in mod.buffers():
            bm += _track_as(b, BUFFER)
        return pm, bm

    # MemTracker's user hooks, fed by the ModTracker emulation below
    def mt_pre_fw(mod, info, inputs, bw):
        global _ac_mod, _in_ac
        mk = info.mk
        if mk in tracked:
            if bw:
                ext((SNAP, mk, PRE_FW_AC))
                if _ac_mod is None:
                    _ac_mod = weakref.ref(mod)
                    _in_ac = True
                return
            if set(parents) - {info.name}:
                # a module called again inside the same forward: another call of it
                ext((INPUT, mk, info.name_id, io_mem(inputs)))
                ext((SNAP, mk, PRE_FW))
                return
            # a top-level module called again: the next iteration (MemTracker raises here)
            tracked.clear()
            ap(ITER)
        if not tracked:
            state["root"] = mk
            ext((MARK, 0))
        pm, bm = track_params_and_buffers(mod)
        tracked[mk] = True
        ext((MOD, mk, info.name_id, pm, bm, io_mem(inputs)))
        ext((SNAP, mk, PRE_FW))

    def mt_post_fw(mod, info, output, bw):
        global _ac_mod, _in_ac
        mk = info.mk
        if mk not in tracked:
            return
        if bw:
            if _ac_mod is not None and _ac_mod() is mod:
                _ac_mod = None
                _in_ac = False
            ext((SNAP, mk, POST_FW_AC))
        else:
            ext((OUTPUT, mk, io_mem(output)))
            ext((SNAP, mk, POST_FW))
            if state["root"] == mk:
                ext((MARK, 1))

    def append_fn(wmod, info):
        # a multi-grad hook on the module's outputs: its backward starts
        def fn(*args):
            if not _active:
                return
            maybe_set_engine_callback()
            add_parent(info, 1)
            mod = wmod()
            if mod is not None and info.mk in tracked:
                mk = info.mk
                ext((SNAP, mk, PRE_BW))

        return fn

    def pop_fn(wmod, info):
        # a multi-grad hook on the module's inputs (or the end of backward): its backward ended
        def fn(*args):
            if not _active:
                return
            mod = wmod()
            if mod is not None and info.mk in tracked:
                ext((SNAP, info.mk, POST_BW))
            remove_parent(info)

        return fn

    def on_grads(tensors, fn, mode):
        if len(tensors) == 1:
            tensors[0].register_hook(lambda g: fn(g))
        else:
            register_multi_grad_hook(tensors, fn, mode=mode)

    # Dynamo traces global module hooks into the graphs it compiles: anything here would
    # break the graph (or be frozen into it). is_compiling() is a constant True while
    # tracing, so the hooks trace to nothing; in eager code they cost one call.
    is_compiling = torch.compiler.is_compiling
    # Modules whose compiled call is running under hooks that already ran for them, outside:
    # torch.compile(module)'s OptimizedModule (for the module it wraps) and module.compile()
    # (below). Dynamo runs the inner module's _call_impl eagerly and would compile each
    # global hook it calls as a frame of its own; the hooks are marked never to be compiled
    # (below), so they run here, eagerly, and stop at this check.
    inner = {}  # id(module) -> how many of its compiled calls are running

    def enter_inner(mod):
        k = id(mod)
        inner[k] = inner.get(k, 0) + 1

    def leave_inner(mod):
        k = id(mod)
        c = inner.get(k, 0)
        if c <= 1:
            inner.pop(k, None)
        else:
            inner[k] = c - 1

    def fw_pre_hook(mod, inputs):
        if is_compiling() or not _active:
            return
        if inner and id(mod) in inner:
            return
        try:
            wrapped = _wrapped(mod)
            if wrapped is not mod:
                enter_inner(wrapped)
            info = _mod_info(mod)
            bw = gtid() != -1
            add_parent(info, 0)
            mt_pre_fw(mod, info, inputs, bw)
            if not bw:
                tensors = grad_tensors(inputs)
                if tensors:
                    on_grads(tensors, pop_fn(weakref.ref(mod), info), "all")
                else:
                    # ModTracker queues these until the next backward; a program that never
                    # runs one (inference) would grow the queue forever
                    if len(post_bw_to_enqueue) >= 100_000:
                        post_bw_to_enqueue.clear()
                    post_bw_to_enqueue.append(pop_fn(weakref.ref(mod), info))
        except Exception as e:
            _internal_error(e)

    def fw_post_hook(mod, inputs, output):
        if is_compiling() or not _active:
            return
        if inner and id(mod) in inner:
            return
        try:
            wrapped = _wrapped(mod)
            if wrapped is not mod:
                leave_inner(wrapped)
            info = _mod_info(mod)
            bw = gtid() != -1
            mt_post_fw(mod, info, output, bw)
            remove_parent(info)
            if not bw:
                tensors = grad_tensors(output)
                if tensors:
                    on_grads(tensors, append_fn(weakref.ref(mod), info), "any")
        except Exception as e:
            _internal_error(e)

    skip_code = _dynamo_skipper()
    if skip_code is not None:
        skip_code(fw_pre_hook.__code__)
        skip_code(fw_post_hook.__code__)
    register_module_forward_pre_hook(fw_pre_hook)
    register_module_forward_hook(fw_post_hook, always_call=True)

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

        def call(*a, **k):
            mod = wmod()
            if mod is None:
                return compiled(*a, **k)
            fw_pre_hook(mod, a)
            enter_inner(mod)
            try:
                out = compiled(*a, **k)
            finally:
                leave_inner(mod)
            fw_post_hook(mod, a, out)
            return out

        self._compiled_call_impl = call

    torch.nn.Module.compile = compile
    import warnings

    # torch.compile(module) warns at every call that global hooks (ours) fire once more for
    # the OptimizedModule: the agent counts that module as the one it wraps (_wrapped)
    warnings.filterwarnings(
        "ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks"
    )


_errors = [0]


def _internal_error(e):
    _errors[0] += 1
    if _errors[0] <= 3:
        import traceback

        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        _message({"t": "agent_error", "text": text})


def _install_optimizer_hooks(torch):
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    import functools
    import weakref

    opt_ids = {}
    # A compiled optimizer step (torch.compile of a function calling opt.step()) traces
    # these hooks: as the module hooks, they trace to nothing (no graph break, no frame of
    # their own); the step's compiled graphs are sampled when they run. Such an optimizer's
    # state is then created and replaced inside compiled code, and no hook of its runs: after
    # each compiled graph, the state of every optimizer whose hooks never ran is counted as
    # Optstate (as the post-step hook does for the others).
    is_compiling = torch.compiler.is_compiling
    optimizers = weakref.WeakSet()  # every optimizer made
    eager = weakref.WeakSet()  # those whose step hooks have run

    Optimizer = torch.optim.Optimizer
    orig_init = Optimizer.__init__

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if not is_compiling():
            optimizers.add(self)

    Optimizer.__init__ = __init__

    def track_state(opt):
        """MemTracker's _track_optimizer_states: the optimizer's state tensors are Optstate."""
        try:
            for st in opt.state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor):
                        _track_as(v, OPT)
        except Exception as e:
            _internal_error(e)

    def sweep():
        if len(optimizers) == len(eager):
            return
        for opt in list(optimizers):
            if opt not in eager:
                track_state(opt)

    global _sweep_compiled_optimizers
    _sweep_compiled_optimizers = sweep

    def pre(opt, args, kwargs):
        global _in_opt
        if is_compiling() or not _active:
            return
        eager.add(opt)
        _in_opt = True
        oid = opt_ids.get(type(opt))
        if oid is None:
            oid = opt_ids[type(opt)] = _name_id(f"{type(opt).__name__}")
        _ext((OPT_BEGIN, oid))
        # step(closure) (LBFGS, Lightning) runs forward and backward inside the step: those
        # ops belong to their modules, their tensors to their own categories
        if "closure" in kwargs and callable(kwargs["closure"]):
            return args, dict(kwargs, closure=outside_step(kwargs["closure"], oid))
        # args[0] is the optimizer itself (Optimizer.profile_hook_step passes step's args)
        if len(args) > 1 and callable(args[1]):
            return (args[0], outside_step(args[1], oid), *args[2:]), kwargs
        return None

    def outside_step(closure, oid):
        def run_closure(*a, **k):
            global _in_opt
            if not _active:
                return closure(*a, **k)
            _in_opt = False
            _ap(OPT_END)
            try:
                return closure(*a, **k)
            finally:
                _in_opt = True
                _ext((OPT_BEGIN, oid))

        return run_closure

    def post(opt, args, kwargs):
        global _in_opt
        if is_compiling() or not _active:
            return
        track_state(opt)
        _in_opt = False
        _ap(OPT_END)

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


def _install_resize(torch):
    """UntypedStorage.resize_ is not seen by dispatch modes (FSDP uses it); as MemTracker."""
    orig = torch.UntypedStorage.resize_

    def resize_(st, size):
        r = orig(st, size)
        e = _known.get(id(st))
        if e is not None:
            nb = st.nbytes()
            if st.device.type == "cuda":
                nb = -(-nb // _min_alloc) * _min_alloc
            if nb != e[1]:
                e[1] = nb
                _ext((SIZE, id(st), nb))
        return r

    torch.UntypedStorage.resize_ = resize_


# ---------------------------------------------------------------------------------------------
# how the program ends


def _chain_excepthook():
    prev = sys.excepthook

    def hook(tp, value, tb):
        try:
            import traceback

            text = "".join(traceback.format_exception(tp, value, tb))
            oom = tp.__name__ == "OutOfMemoryError" or isinstance(value, MemoryError)
            _message({"t": "exception", "type": tp.__name__, "text": text, "oom": oom})
        except Exception:
            pass
        prev(tp, value, tb)

    sys.excepthook = hook


def _install_sigterm():
    """Ship what is buffered before SIGTERM's default death. Not under torchrun: its agent
    SIGTERMs workers that may sit in a collective, where a Python-level handler would wait."""
    import signal

    if "TORCHELASTIC_RUN_ID" in os.environ:
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_term(signum, frame):
            _message({"t": "signal", "signal": signum})
            _finish("signal")
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):
        pass  # not the main thread


_finished = [False]


def _finish(how):
    global _active
    # not `_sock is None`: with the collector gone the spool still takes the goodbye
    if _finished[0] or not _active:
        return
    _finished[0] = True
    _cycles_state["on"] = False
    _time_mark()
    msg = {"t": "bye", "how": how}
    compiled = _compile_counters()
    if compiled:
        msg["compile"] = compiled
    try:
        if _backend == "cuda" and _torch.cuda.is_initialized():
            msg["memory_stats"] = dict(_torch.cuda.memory_stats())
            _send_device(_torch)  # the device the program ended on (after set_device)
            _write_snapshot("exit")
    except Exception:
        pass
    _active = False
    _message(msg)
    _stop_sending()


def _compile_counters():
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


def _at_exit():
    _finish("exit")


# ---------------------------------------------------------------------------------------------
# CUDA: device facts, allocator history, OOM


def _setup_cuda(torch):
    """Everything here would initialise CUDA, so it waits for the program to do that itself
    (torch.cuda._lazy_call): a torchrun worker must pick its device before any context exists,
    and a process that never uses CUDA must not get one. A failure here is reported, never
    raised (an exception in a queued call would surface in the program)."""

    def on_oom(device, alloc, device_allocated, device_free):
        try:
            msg = {
                "t": "oom",
                "device": device,
                "alloc": alloc,
                "device_allocated": device_allocated,
                "device_free": device_free,
            }
            try:
                # the allocator's counters as they stood when it gave up (the observer runs
                # without the allocator's lock held, as _dump_snapshot below needs too)
                msg["memory_stats"] = dict(torch.cuda.memory_stats(device))
            except Exception as e:
                msg["memory_stats_error"] = repr(e)
            _message(msg)
            _write_snapshot("oom")
        except Exception:
            pass

    def on_cuda_init():
        # --cycles wants allocation stacks for the tensors it finds, as
        # torch.utils.viz._cycles.observe_tensor_cycles turns the history on
        if os.environ.get("MEMTRACK_SNAPSHOT") or os.environ.get("MEMTRACK_CYCLES"):
            try:
                n = int(os.environ.get("MEMTRACK_MAX_SNAPSHOT_ENTRIES", "100000"))
                torch.cuda.memory._record_memory_history(max_entries=n)
            except Exception as e:
                _message({"t": "agent_error", "text": f"_record_memory_history: {e!r}"})
        try:
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except Exception as e:
            _message({"t": "agent_error", "text": f"OOM observer: {e!r}"})
        _send_device(torch)

    try:
        torch.cuda._lazy_call(on_cuda_init)
    except Exception as e:
        _message({"t": "agent_error", "text": f"torch.cuda._lazy_call: {e!r}"})


def _send_device(torch):
    try:
        i = torch._C._cuda_getDevice()
        p = torch.cuda.get_device_properties(i)
        msg = {"t": "device", "name": p.name, "total_bytes": p.total_memory, "index": i}
        uuid = getattr(p, "uuid", None)
        if uuid is not None:
            u = str(uuid)
            msg["uuid"] = u if u.startswith(("GPU-", "MIG-")) else "GPU-" + u
        _message(msg)
    except Exception:
        pass


def _write_snapshot(reason):
    prefix = os.environ.get("MEMTRACK_SNAPSHOT")
    if not prefix:
        return
    torch = _torch
    if not torch.cuda.is_initialized():
        return
    rank = _int_env("RANK")
    tag = f".rank{rank}" if rank is not None else f".pid{os.getpid()}"
    path = f"{prefix}{tag}.{reason}.pickle"
    torch.cuda.memory._dump_snapshot(path)
    _message({"t": "snapshot", "reason": reason, "path": path})


# ---------------------------------------------------------------------------------------------
# --cycles: reference cycles that hold tensors, found as torch.utils.viz._cycles finds them
#
# A gc callback turns on DEBUG_SAVEALL when a collection starts, so what it finds unreachable
# lands in gc.garbage instead of being freed. When the collection found something, a one-shot
# profile hook runs right after it (the callback itself may not start a collection): it
# collects everything else that is garbage, describes the objects that lead to a tensor (their
# references labelled as _cycles.annotated_references labels them), sends that, and frees the
# garbage with a last collection. Collections that find nothing cost one callback.

_cycles_state = {"on": False, "busy": False, "count": 0}
MAX_CYCLE_NODES = 300
MAX_CYCLE_REPORTS = 200


def _watch_cycles(torch):
    import gc

    state = _cycles_state
    state["on"] = True
    cuda = _backend == "cuda"

    def is_tensor(obj):
        try:
            if not isinstance(obj, torch.Tensor):
                return False
            dev = obj.device.type
            if dev == "meta":
                return False
            if cuda and dev != "cuda":
                return False
            try:
                from torch._subclasses.fake_tensor import is_fake

                if is_fake(obj):
                    return False
            except Exception:
                pass
            return True
        except Exception:
            return False

    def callback(phase, info):
        if not state["on"] or state["busy"]:
            return
        if phase == "start":
            state["debug"] = gc.get_debug()
            if not state["debug"] & gc.DEBUG_SAVEALL:  # the program's own SAVEALL: hands off
                gc.set_debug(state["debug"] | gc.DEBUG_SAVEALL)
            return
        debug = state.get("debug", 0)
        if debug & gc.DEBUG_SAVEALL:
            return
        if not gc.garbage:
            gc.set_debug(debug)
            return
        # The collector is still running (gc.collect() would do nothing): continue at the
        # first profile event after this callback has returned.
        state["busy"] = True
        generation = info.get("generation", 2)
        prev = sys.getprofile()
        me = callback.__code__

        def after(frame, event, arg):
            if frame is not None and frame.f_code is me:
                return None  # the return from this callback, still inside the collection
            sys.setprofile(prev)
            try:
                if generation != 2:
                    gc.collect()  # still saving: whatever else is garbage is reported too
                garbage = list(gc.garbage)
                gc.garbage.clear()
                gc.set_debug(debug)
                if any(is_tensor(o) for o in garbage):
                    _report_cycles(torch, garbage, generation, is_tensor)
                del garbage
                gc.collect()  # now free what was saved
            except Exception as e:
                gc.set_debug(debug)
                _internal_error(e)
            finally:
                state["busy"] = False
            return prev(frame, event, arg) if prev is not None else None

        sys.setprofile(after)

    gc.callbacks.append(callback)


def _report_cycles(torch, garbage, generation, is_tensor):
    import gc
    import weakref

    state = _cycles_state
    if state["count"] >= MAX_CYCLE_REPORTS:
        return
    objs = [o for o in garbage if not isinstance(o, weakref.ProxyTypes)]
    index = {id(o): i for i, o in enumerate(objs)}
    referents = []
    referrers = [[] for _ in objs]
    for i, o in enumerate(objs):
        rs = []
        for r in gc.get_referents(o):
            j = index.get(id(r))
            if j is not None:
                rs.append(j)
                referrers[j].append(i)
        referents.append(rs)
    # keep what leads to a tensor: search backwards from the tensors, nearest first
    roots = [i for i, o in enumerate(objs) if is_tensor(o)]
    keep, order, todo = set(), [], list(roots)
    while todo:
        nxt = []
        for i in todo:
            if i in keep:
                continue
            keep.add(i)
            order.append(i)
            nxt.extend(referrers[i])
        todo = nxt
    omitted = max(0, len(order) - MAX_CYCLE_NODES)
    order = order[:MAX_CYCLE_NODES]
    new_id = {old: k for k, old in enumerate(order)}
    stacks = _allocation_stacks(torch) if any(
        objs[i].device.type == "cuda" for i in roots if i in new_id
    ) else {}
    nodes, edges = [], []
    for old in order:
        o = objs[old]
        node = {"label": _annotate(o, torch), "type": _type_name(o), "tensor": None}
        if old in roots:
            node["tensor"] = _tensor_facts(o, stacks)
        nodes.append(node)
        labels = _references(o)
        for j in referents[old]:
            k = new_id.get(j)
            if k is None:
                continue
            names = labels.get(id(objs[j]), ["?"])
            edges.append([new_id[old], k, ", ".join(dict.fromkeys(names))])
    state["count"] += 1
    cid = state["count"]
    _write_json(
        {
            "t": "cycles",
            "id": cid,
            "generation": generation,
            "garbage": len(objs),
            "omitted": omitted,
            "nodes": nodes,
            "edges": edges,
        }
    )
    _ext((CYCLE, cid))


def _tensor_facts(t, stacks):
    dev = t.device
    try:
        st = t.untyped_storage()
        nb = st.nbytes()
        ptr = st.data_ptr()
    except Exception:  # sparse, nested and other layouts without one storage
        nb, ptr = 0, 0
    if dev.type == "cuda":
        nb = -(-nb // _min_alloc) * _min_alloc
    return {
        "bytes": nb,
        "storage": ptr if ptr else id(t),
        "shape": list(t.shape),
        "dtype": str(t.dtype).replace("torch.", ""),
        "device": str(dev),
        "stack": stacks.get(ptr, []) if ptr else [],
    }


def _allocation_stacks(torch):
    """Storage address -> allocation stack (innermost first), from the allocator's history."""
    out = {}
    try:
        snap = torch.cuda.memory._snapshot()
    except Exception:
        return out
    try:
        from torch.cuda._memory_viz import _frame_filter
    except Exception:
        _frame_filter = None
    for seg in snap.get("segments", []):
        addr = seg["address"]
        for blk in seg.get("blocks", []):
            if blk.get("state") == "active_allocated":
                frames = blk.get("frames")
                if frames is None and blk.get("history"):
                    frames = blk["history"][0].get("frames", [])
                lines = []
                for f in frames or []:
                    name, filename = f.get("name", "?"), f.get("filename", "?")
                    if _frame_filter is not None and not _frame_filter(name, filename):
                        continue
                    if "_memtrack_agent" in filename:
                        continue
                    lines.append(f"{filename}:{f.get('line', 0)}:{name}")
                    if len(lines) >= 40:
                        break
                out[addr] = lines
            addr += blk["size"]
    return out


def _type_name(o):
    t = type(o)
    m = getattr(t, "__module__", "")
    q = getattr(t, "__qualname__", t.__name__)
    return q if m in ("builtins", None, "") else f"{m}.{q}"


def _short(x, n=40):
    try:
        r = repr(x)
    except Exception:
        r = "?"
    return r if len(r) <= n else r[: n - 3] + "..."


def _annotate(o, torch):
    """A short description of an object, as _cycles.object_annotation writes one."""
    import types

    if isinstance(o, (int, float, complex, type(None), str, bytes)):
        return _short(o)
    if isinstance(o, torch.Tensor):
        shape = ", ".join(str(d) for d in o.shape)
        kind = "Parameter" if isinstance(o, torch.nn.Parameter) else type(o).__name__
        return f"{kind} {str(o.dtype).replace('torch.', '')}[{shape}] {o.device}"
    if isinstance(o, types.FunctionType):
        return f"function {o.__qualname__}"
    if isinstance(o, types.MethodType):
        return f"method {getattr(o.__func__, '__qualname__', '?')}"
    if isinstance(o, types.FrameType):
        f = os.path.basename(o.f_code.co_filename)
        return f"frame {o.f_code.co_name} {f}:{o.f_lineno}"
    if isinstance(o, types.TracebackType):
        f = os.path.basename(o.tb_frame.f_code.co_filename)
        return f"traceback {f}:{o.tb_lineno}"
    if isinstance(o, types.ModuleType):
        return f"module {o.__name__}"
    if isinstance(o, type):
        return f"type {o.__name__}"
    if isinstance(o, (list, tuple, set, frozenset, dict)):
        return f"{type(o).__name__}[{len(o)}]"
    if type(o).__name__ == "cell":
        return "cell"
    if isinstance(o, torch.nn.Module):
        return f"{type(o).__name__} (nn.Module)"
    return type(o).__qualname__


def _references(o):
    """id(referent) -> labels of the references o holds (_cycles.annotated_references)."""
    import types
    import weakref

    refs = {}

    def add(name, x):
        refs.setdefault(id(x), []).append(name)

    def attrs(*names):
        for a in names:
            try:
                add(a, getattr(o, a))
            except Exception:
                pass

    try:
        if isinstance(o, (tuple, list)):
            for i, x in enumerate(o):
                add(f"[{i}]", x)
        elif isinstance(o, dict):
            for k, v in o.items():
                add("key", k)
                add(f"[{_short(k, 30)}]", v)
        elif isinstance(o, (set, frozenset)):
            for x in o:
                add("element", x)
        elif isinstance(o, types.FunctionType):
            attrs("__defaults__", "__closure__", "__globals__", "__code__", "__kwdefaults__")
        elif isinstance(o, types.FrameType):
            attrs("f_back", "f_code", "f_globals", "f_builtins")
            if type(o.f_locals) is dict:
                for k, v in o.f_locals.items():
                    add(f"local {k}", v)
        elif isinstance(o, types.MethodType):
            attrs("__self__", "__func__")
        elif isinstance(o, types.TracebackType):
            attrs("tb_frame", "tb_next")
        elif isinstance(o, BaseException):
            attrs("__traceback__", "__context__", "__cause__", "args")
        elif type(o).__name__ == "cell":
            attrs("cell_contents")
        elif type(o) is weakref.ref:
            import gc

            rs = gc.get_referents(o)
            if len(rs) == 1:
                add("__callback__", rs[0])
        d = getattr(o, "__dict__", None)
        if isinstance(d, dict) and not isinstance(o, type):
            add("__dict__", d)
            for k, v in d.items():
                add(f".{k}", v)  # values held inline (3.11+ managed dicts)
        attrs("__class__")
    except Exception:
        pass
    return refs
