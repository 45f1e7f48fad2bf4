"""Per-op sampling and storage accounting: the TorchDispatchMode, the table of live storages
(id(storage) -> category, bytes, weakref reporting its death), op ids and names, the CUDA
allocator reader, and `track_as` for the hooks that categorise tensors (parameters, gradients,
optimizer state).

What runs per operator is kept to a minimum: the op's outputs' storages are looked up in a
dict, new ones get a weakref whose callback reports the free, and one int (four on CUDA) is
written into the spool (transport.ap / ext). Op names, the current module, MemTracker's
category totals and peaks are all worked out by the collector (src/record/replay/), so no
strings are built and no snapshots are copied here.

The hot path reads only this module's globals (bound once by install(), as closures were
before) and the spool functions; `in_opt` / `in_ac` are set by optim.py and modules.py.
"""

import weakref

from . import transport
from .dynamo import skipper
from .protocol import ACT, ADD, DEL, MSG_OP, OPT, REF, SIZE, TEMP
from .transport import ap as _ap
from .transport import ext as _ext

# set by the hooks, read per new storage
in_opt = False  # inside optimizer.step(): new storages are Optstate
in_ac = False  # recomputing an activation-checkpointed forward in backward
min_alloc = 512  # MemTracker's rounding of CUDA storages (1 without the caching allocator)
mode = None  # the dispatch mode, once installed

_known = {}  # id(storage) -> [category, bytes, weakref]
_known_get = _known.get
_fids = {}  # OpOverload -> code (fid << 2 | mutable << 1), -1 for skipped ops
_fids_get = _fids.get
_op_names = []
_wref = weakref.ref

# bound by install()
_torch = None
_Tensor = None
_gtid = None
_cuda = False
_stats_reader = None
_skip_code = None


def storage_bytes(key):
    """The bytes counted for a live storage (by id), or None when it is not tracked."""
    e = _known_get(key)
    return None if e is None else e[1]


def _on_del(k):
    try:
        if _known.pop(k, None) is not None:
            _ext((DEL, k))
    except Exception:  # interpreter shutdown
        pass


def _new_storage(st, k, t, bw):
    cat = OPT if in_opt else (TEMP if bw and not in_ac else ACT)
    nb = st.nbytes()
    dev = t.get_device()
    if dev >= 0:
        nb = -(-nb // min_alloc) * min_alloc
    _known[k] = [cat, nb, _wref(st, lambda w, k=k: _on_del(k))]
    _ext((ADD, k, cat, dev, nb))


def _resized(st, k, e, t):
    nb = st.nbytes()
    if t.get_device() >= 0:
        nb = -(-nb // min_alloc) * min_alloc
    if nb != e[1]:
        e[1] = nb
        _ext((SIZE, k, nb))


def _other_output(out, code, bw):
    # tuples and lists of tensors, and tensor subclasses, the slow way
    if isinstance(out, (tuple, list)):
        for t in out:
            if isinstance(t, _Tensor):
                track(t, code, bw)
    elif isinstance(out, _Tensor):
        track(out, code, bw)


def track(t, code, bw):
    """Account a tensor an op (code) produced: new storages are counted, resized ones
    (a mutable op's) re-measured."""
    for st in storages(t):
        k = id(st)
        e = _known_get(k)
        if e is None:
            _new_storage(st, k, t, bw)
        elif code & 2:
            _resized(st, k, e, t)


def _dispatch(self, func, types, args=(), kwargs=None):
    """MemtrackMode.__torch_dispatch__: run the op, account its outputs, sample."""
    out = func(*args, **kwargs) if kwargs else func(*args)
    code = _fids_get(func)
    if code is None:
        code = _new_func(func)
    if code < 0:
        return out
    bw = _gtid() != -1
    if type(out) is _Tensor:
        try:
            st = out.untyped_storage()
            k = id(st)
            e = _known_get(k)
            if e is None:
                _new_storage(st, k, out, bw)
            elif code & 2:
                _resized(st, k, e, out)
        except Exception:
            pass
    elif out is not None:
        try:
            _other_output(out, code, bw)
        except Exception:
            pass
    if _cuda:
        _ext((code | bw,) + _stats_reader())
    else:
        _ap(code | bw)
    return out


def sample(code, bw):
    """One sample outside the mode (a compiled graph's call)."""
    if _cuda:
        _ext((code | bw,) + _stats_reader())
    else:
        _ap(code | bw)


def _should_skip_dynamo(cls):
    return _skip_code is None


# torch.compile skips every frame while a mode without this is on the stack (the program would
# silently run eager); with it, dynamo switches the mode off while it compiles and back on
# while compiled code runs, so the ops compiled code still dispatches (extern kernels) are
# sampled and each compiled graph call is sampled by compiled.py.
def _ignore_compile_internals(cls):
    return True


def install(torch, backend):
    """Bind the hot path to this torch and backend and make the dispatch mode (not entered)."""
    global _torch, _Tensor, _gtid, _cuda, _stats_reader, _skip_code, mode
    from torch.utils._python_dispatch import TorchDispatchMode

    _torch = torch
    _Tensor = torch.Tensor
    _gtid = torch._C._current_graph_task_id
    _cuda = backend == "cuda"
    _stats_reader = _cuda_stats_reader(torch) if _cuda else None
    # TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo, a Python wrapper
    # that costs about 1 us per op. Marking the code object to skip (recursively) does the
    # same for dynamo without the wrapper; where that API is missing, keep the wrapper.
    _skip_code = skipper()

    class MemtrackMode(TorchDispatchMode):
        _should_skip_dynamo = classmethod(_should_skip_dynamo)
        ignore_compile_internals = classmethod(_ignore_compile_internals)
        __torch_dispatch__ = _dispatch

    if _skip_code is not None:
        for f in (_dispatch, _new_storage, _resized, _other_output, track):
            _skip_code(f.__code__)
        _skip_code(_on_del.__code__)
    mode = MemtrackMode()
    _install_resize(torch)
    return mode


def track_as(t, cat):
    """MemTracker's _update_and_maybe_create_winfos: (re)categorise t's storages; bytes."""
    total = 0
    for st in storages(t):
        k = id(st)
        e = _known_get(k)
        if e is None:
            nb = st.nbytes()
            dev = t.get_device()
            if dev >= 0:
                nb = -(-nb // min_alloc) * min_alloc
            _known[k] = e = [cat, nb, _wref(st, lambda w, k=k: _on_del(k))]
            _ext((ADD, k, cat, dev, nb))
        elif e[0] != cat:
            e[0] = cat
            _ext((REF, k, cat))
        total += e[1]
    return total


def storages(t):
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


def _new_func(func):
    """Intern an op: its id goes in the stream, its name once in a message."""
    if func is _torch.ops.aten.detach.default:
        _fids[func] = -1  # MemoryTracker skips detach
        return -1
    try:
        mutable = bool(func._schema.is_mutable)
    except Exception:
        mutable = True
    return intern(func, getattr(func, "__name__", str(func)), mutable)


def intern(key, name, mutable):
    """The code of an op (or pseudo-op) `key`, announced by name the first time."""
    code = _fids_get(key)
    if code is not None:
        return code
    fid = len(_op_names)
    _op_names.append(name)
    code = (fid << 2) | (2 if mutable else 0)
    _fids[key] = code
    transport.write_json({"t": MSG_OP, "id": fid, "name": name})
    return code


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


def _install_resize(torch):
    """UntypedStorage.resize_ is not seen by dispatch modes (FSDP uses it); as MemTracker."""
    orig = torch.UntypedStorage.resize_

    def resize_(st, size):
        r = orig(st, size)
        e = _known.get(id(st))
        if e is not None:
            nb = st.nbytes()
            if st.device.type == "cuda":
                nb = -(-nb // min_alloc) * min_alloc
            if nb != e[1]:
                e[1] = nb
                _ext((SIZE, id(st), nb))
        return r

    torch.UntypedStorage.resize_ = resize_
