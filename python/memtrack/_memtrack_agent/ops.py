"""Per-op sampling and storage accounting: the TorchDispatchMode (or the compiled observer's
entry, `observed`: observer.cpp, native.py, activate.choose_observer), the table of
live storages (id(storage) -> category, bytes, weakref reporting its death), op ids and
names (parts.py: the storages of any tensor), and `track_as` for the hooks that categorise tensors
(parameters, gradients, optimizer state).

What runs per operator is kept to a minimum: the op's outputs' storages are looked up in a
dict, new ones get a weakref whose callback reports the free, and one int (four on CUDA) is
written into the spool (transport.ap / ext). On the CPU the compiled observer does the same
in C for an op whose outputs are plain dense tensors (fast_path.h), with this module's table
and writers; `observed` has the rest. Op names, the current module, MemTracker's category
totals and peaks are all worked out by the collector (src/record/replay/), so no strings are
built and no snapshots are copied here.

The hot path reads only this module's globals (bound once by install(), as closures were
before) and the spool functions; `in_opt` / `in_ac` are set by optim.py and modules.py.

Nothing here raises into the program. `parts()` is the one way to the storages of a tensor,
whatever it is (sparse, nested, functorch's wrappers, subclasses, fake and meta): what is
not one dense storage is measured by the storages it has (a sparse tensor's indices and
values) or not at all, and `note()`s it so the file says how many were and why. Each hook
body sits in a try whose except reports the agent's own failure (transport.internal_error)
and lets the program go on; a try costs nothing in CPython 3.11 while nothing raises.
"""

import functools
import weakref

from . import parts as _parts
from . import state, transport
from .cuda import stats_reader as cuda_stats_reader
from .dynamo import skipper
from .parts import note, parts, storages  # noqa: F401 (storages: the module tracker's)
from .protocol import (
    ACT,
    ADD,
    DEL,
    MSG_OP,
    NOTE,
    OPT,
    REF,
    SIZE,
    TEMP,
    WHY_META,
)
from .transport import ap as _ap
from .transport import ext as _ext
from .transport import ext2 as _ext2
from .transport import ext6 as _ext6
from .transport import internal_error as _internal_error

# set by the hooks, read per new storage
in_opt = False  # inside optimizer.step(): new storages are Optstate
in_ac = False  # recomputing an activation-checkpointed forward in backward
min_alloc = 512  # MemTracker's rounding of CUDA storages (1 without the caching allocator)
mode = None  # the dispatch mode, once installed

_known = {}  # id(storage) -> [category, bytes, weakref]
_known_get = _known.get
_fids = {}  # pseudo-op key (compiled.py) -> code (fid << 2 | mutable << 1)
_fids_get = _fids.get
# id(OpOverload) -> (code, run directly): keyed by id, because OpOverload.__hash__ is a Python
# method (0.3-0.5 us a lookup); the OpOverloads are kept alive (_funcs) so their ids stay
# theirs. code -1: not sampled (detach, as MemoryTracker).
_ops = {}
_ops_get = _ops.get
_funcs = []
_OpOverload = None
_op_names = []
_wref = weakref.ref
_native = None  # the compiled observer (native.py), when it observes instead of the mode
_native_codes = []  # its op ids -> codes
_Storage = None

# bound by install()
_torch = None
_Tensor = None
_Parameter = None
_gtid = None
_cuda = False
_stats_reader = None
_skip_code = None


def storage_bytes(key):
    """The bytes counted for a live storage (by id), or None when it is not tracked."""
    e = _known_get(key)
    return None if e is None else e[1]


def _new_category(bw):
    """MemTracker's category of a storage an op makes: Optstate inside optimizer.step(), Temp
    in backward (but for a checkpoint's recomputation), else Activation."""
    return OPT if in_opt else (TEMP if bw and not in_ac else ACT)


def _on_del(k, w=None):
    """A counted storage died: its weakref's callback, as _death_callback(k) makes it."""
    try:
        if _known.pop(k, None) is not None:
            _ext2(DEL, k)
    except Exception:  # interpreter shutdown
        pass


# _death_callback(k): the weakref callback of storage k, _on_del(k, weakref), made in C (no
# Python frame per storage); with the compiled observer it is the observer's death(k), a C
# object, on the CPU (no bytecode), and calls _on_del through its guarded() on CUDA, so that a
# signal's exception raised in it reaches the program (Python loses one raised in a weakref
# callback: docs/record.md, Known limits)
_death_callback = functools.partial(functools.partial, _on_del)


def _new_storage(st, k, t, bw, sample=None):
    """Start counting a dense tensor's storage; on CPU, `sample` (an op's record) is written
    with the ADD record in one go. True when it was."""
    dev = t.get_device()
    if dev < 0 and t.is_meta:  # CPU and meta both say -1: a meta tensor holds no memory
        note(t, WHY_META, _new_category(bw))
        return False
    return _new_dense(st, k, bw, dev, sample)


def why_uncounted(st):
    """Why a storage _new_part did not count is not counted (a NOTE's `why`): a meta one holds
    no memory (under `memtrack estimate`, fake_memory.py says the host's CPU storages apart)."""
    return WHY_META


def _new_part(st, k, cat):
    """Start tracking a storage reached the slow way (parts() of an unusual tensor, track_as):
    its device is the storage's own. None for a meta storage (a fake or meta tensor's)."""
    d = st.device
    if d.type == "meta":
        return None
    dev = -1 if d.type == "cpu" or d.index is None else d.index
    nb = st.nbytes()
    if dev >= 0:
        nb = -(-nb // min_alloc) * min_alloc
    _known[k] = e = [cat, nb, _wref(st, _death_callback(k))]
    _ext((ADD, k, cat, dev, nb))
    return e


def _resized(st, k, e, dev):
    nb = st.nbytes()
    if dev >= 0:
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
    (a mutable op's) re-measured; an unusual tensor's parts, and a note saying so."""
    sts, why = parts(t)
    if why is None and (type(t) is _Tensor or type(t) is _Parameter):
        for st in sts:  # one
            k = id(st)
            e = _known_get(k)
            if e is None:
                _new_storage(st, k, t, bw)
            elif code & 2:
                _resized(st, k, e, t.get_device())
        return
    cat = _new_category(bw)
    if why is not None:
        note(t, why, cat)
    for st in sts:
        k = id(st)
        e = _known_get(k)
        if e is None:
            if _new_part(st, k, cat) is None:
                note(t, why_uncounted(st), cat)
        elif code & 2:
            d = st.device
            _resized(st, k, e, -1 if d.type == "cpu" or d.index is None else d.index)


def _dispatch(self, func, types, args=(), kwargs=None):
    """MemtrackMode.__torch_dispatch__: run the op, account its outputs, sample."""
    e = _ops_get(id(func))
    if e is None:
        e = _new_func(func)
    # OpOverload.__call__ is a Python frame that only calls func._op while no PyObject
    # dispatcher is set: call _op from here (about 0.3 us an op; a warning the op raises then
    # points at this frame, which keep_warning_locations() looks past)
    if e[1] and func._pyobj_dispatcher is None:
        out = func._op(*args, **kwargs) if kwargs else func._op(*args)
    else:
        out = func(*args, **kwargs) if kwargs else func(*args)
    code = e[0]
    if code < 0:
        return out
    try:
        bw = _gtid() != -1
        if type(out) is _Tensor:
            try:
                st = out.untyped_storage()
            except Exception:  # sparse, functorch's wrappers: no storage of their own
                st = None
            if st is None:
                track(out, code, bw)
            else:
                k = id(st)
                e = _known_get(k)
                if e is None:
                    if _new_storage(st, k, out, bw, code | bw):
                        return out  # sampled with it
                elif code & 2:
                    _resized(st, k, e, out.get_device())
        elif out is not None:
            _other_output(out, code, bw)
        if _cuda:
            _ext((code | bw,) + _stats_reader())
        else:
            _ap(code | bw)
    except Exception as e:  # the agent's own failure: reported, never the program's
        _internal_error(e)
    return out


def observed(fid, out, dev):
    """The compiled observer's per-op entry (observer.cpp): op `fid` ran, and `out` is its
    output's storage (a plain dense tensor's, on device `dev`: -1 the CPU), False (a plain
    meta tensor), the tensor itself (sparse, nested, functorch's, a subclass), None, or a tuple
    of these. The same accounting and sample as _dispatch's after the op."""
    try:
        code = _native_codes[fid]
    except IndexError:
        code = _native_code(fid)
    if code < 0:
        return
    try:
        bw = _gtid() != -1
        if type(out) is _Storage:
            k = id(out)
            e = _known_get(k)
            if e is None:
                if _new_dense(out, k, bw, dev, code | bw):
                    return  # sampled with it
            elif code & 2:
                _resized(out, k, e, dev)
        elif out is not None:
            _other_observed(out, code, bw)
        if _cuda:
            _ext((code | bw,) + _stats_reader())
        else:
            _ap(code | bw)
    except Exception as e:  # the agent's own failure: reported, never the program's
        _internal_error(e)


def _native_code(fid):
    """The code of the compiled observer's op `fid`, interned by name when first seen."""
    try:
        while len(_native_codes) <= fid:
            name, mutable = _native.op(len(_native_codes))
            # (keyed apart from the pseudo-ops' names)
            _native_codes.append(intern(("op", name), name, mutable))
        return _native_codes[fid]
    except Exception as e:
        _internal_error(e)
        return -1


def _device_index(st):
    d = st.device
    return -1 if d.type == "cpu" or d.index is None else d.index


def _new_dense(st, k, bw, dev, sample=None):
    """Start counting a storage on device `dev` (never a meta one) made by an op in backward
    or not (`bw`); `sample` as _new_storage's."""
    cat = _new_category(bw)
    nb = st.nbytes()
    if dev >= 0:
        nb = -(-nb // min_alloc) * min_alloc
    _known[k] = [cat, nb, _wref(st, _death_callback(k))]
    if sample is None or _cuda:
        _ext((ADD, k, cat, dev, nb))
        return False
    _ext6(ADD, k, cat, dev, nb, sample)
    return True


def _other_observed(out, code, bw):
    # several outputs, or a tensor that is not a plain dense one; False: a plain meta tensor
    # (the observer gives it no Python object: it is noted without being known again)
    for o in out if type(out) is tuple else (out,):
        if o is False:
            _ext((NOTE, WHY_META, _new_category(bw), -1))
        elif type(o) is _Storage:
            k = id(o)
            e = _known_get(k)
            if e is None:
                _new_dense(o, k, bw, _device_index(o))
            elif code & 2:
                _resized(o, k, e, _device_index(o))
        elif isinstance(o, _Tensor):
            track(o, code, bw)


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
    global _torch, _Tensor, _Parameter, _gtid, _cuda, _stats_reader, _skip_code, mode
    global _OpOverload
    from torch.utils._python_dispatch import TorchDispatchMode

    _OpOverload = getattr(torch._ops, "OpOverload", None)
    try:
        if not hasattr(torch.ops.aten.add.Tensor, "_pyobj_dispatcher"):
            _OpOverload = None  # another OpOverload.__call__ than the one _dispatch mirrors
    except Exception:
        _OpOverload = None

    _torch = torch
    _Tensor = torch.Tensor
    _Parameter = torch.nn.Parameter
    _parts.bind(torch)
    _gtid = torch._C._current_graph_task_id
    _cuda = backend == "cuda"
    _stats_reader = cuda_stats_reader(torch) if _cuda else None
    # TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo, a Python wrapper
    # that costs about 1 us per op. Marking the code object to skip (recursively) does the
    # same for dynamo without the wrapper; where that API is missing, keep the wrapper.
    _skip_code = skipper()

    class MemtrackMode(TorchDispatchMode):
        _should_skip_dynamo = classmethod(_should_skip_dynamo)
        ignore_compile_internals = classmethod(_ignore_compile_internals)
        __torch_dispatch__ = _dispatch

    if _skip_code is not None:
        hot = (_dispatch, _new_func, _new_storage, _new_dense, _new_category, _new_part)
        for f in hot + (_resized, _other_output, track, parts):
            _skip_code(f.__code__)
        _skip_code(_on_del.__code__)
    mode = MemtrackMode()
    _install_resize(torch)
    _skip_dispatch_rule_lookup(MemtrackMode)
    state.undo.append(_forget_storages)
    return mode


def _forget_storages():
    """Drop every storage's weakref (its callback would report a free nobody reads)."""
    _known.clear()
    _parts.forget()


def leave_dispatch_stack():
    """Take the agent's mode off torch's dispatch stack, wherever it is, keeping the others in
    their order, and stop the compiled observer (a forked child, or the end of an in-process
    recording)."""
    if _native is not None:
        _native.uninstall()
    leave_this_threads_stack()


def leave_this_threads_stack():
    """Take the agent's mode off this thread's dispatch stack, keeping the others in order."""
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    C = state.torch._C
    others = []
    while C._len_torch_dispatch_stack() > 0:
        m = _pop_mode()
        if m is not mode:
            others.append(m)
    for m in reversed(others):
        _push_mode(m)


def _skip_dispatch_rule_lookup(mode_class):
    """For every op a dispatch mode sees, torch's C++ asks the Python function
    torch._library.simple_registry.find_torch_dispatch_rule whether a rule is registered for
    the op and the mode's class (three Python frames, about 1 us an op, a tenth of the agent's
    cost on a loop of small ops). Nothing registers one for the agent's private class, so for
    it the answer is None; any other class gets torch's own answer. The C++ side binds the
    function on its first use, so this is replaced before the mode sees any op (where another
    mode ran first, it changes nothing)."""
    try:
        import torch._library.simple_registry as registry

        find = registry.find_torch_dispatch_rule
    except Exception:
        return

    def find_torch_dispatch_rule(op, torch_dispatch_class):
        if torch_dispatch_class is mode_class:
            return None
        return find(op, torch_dispatch_class)

    find_torch_dispatch_rule.__wrapped__ = find
    registry.find_torch_dispatch_rule = find_torch_dispatch_rule
    state.undo.append(lambda: setattr(registry, "find_torch_dispatch_rule", find))
    if _skip_code is not None:
        _skip_code(find_torch_dispatch_rule.__code__)


def track_as(t, cat):
    """MemTracker's _update_and_maybe_create_winfos: (re)categorise t's storages; bytes."""
    sts, why = parts(t)
    if why is not None:
        note(t, why, cat)
    total = 0
    for st in sts:
        k = id(st)
        e = _known_get(k)
        if e is None:
            e = _new_part(st, k, cat)
            if e is None:
                note(t, why_uncounted(st), cat)
                continue
        elif e[0] != cat:
            e[0] = cat
            _ext((REF, k, cat))
        total += e[1]
    return total


def _new_func(func):
    """Intern an op: (its code, whether _dispatch may call its _op directly); its id goes in
    the stream, its name once in a message. Never raises: an op the agent cannot name is run
    and not sampled."""
    try:
        direct = _OpOverload is not None and type(func) is _OpOverload
        if func is _torch.ops.aten.detach.default:
            code = -1  # MemoryTracker skips detach
        else:
            try:
                mutable = bool(func._schema.is_mutable)
            except Exception:
                mutable = True
            code = intern(func, getattr(func, "__name__", str(func)), mutable)
    except Exception as err:
        _internal_error(err)
        direct, code = False, -1
    _funcs.append(func)
    e = _ops[id(func)] = (code, direct)
    return e


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


def _install_resize(torch):
    """UntypedStorage.resize_ is not seen by dispatch modes (FSDP uses it); as MemTracker."""
    orig = torch.UntypedStorage.resize_

    def resize_(st, size):
        r = orig(st, size)
        try:
            e = _known.get(id(st))
            if e is not None:
                nb = st.nbytes()
                if st.device.type != "cpu":  # CUDA's, or the estimate's device (meta)
                    nb = -(-nb // min_alloc) * min_alloc
                if nb != e[1]:
                    e[1] = nb
                    _ext((SIZE, id(st), nb))
        except Exception as e:
            _internal_error(e)
        return r

    torch.UntypedStorage.resize_ = resize_
    state.undo.append(lambda: setattr(torch.UntypedStorage, "resize_", orig))
