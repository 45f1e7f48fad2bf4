"""`memtrack estimate`: the values of the device's tensors, where the host can know them, and
what the program is told where it cannot (docs/estimate.md, "Values the program reads").

- Known values. A device tensor whose values come from the host keeps them beside its meta
  twin: a CPU storage of the same bytes (its "shadow", one per meta storage, so views and
  in-place ops see one another). Tensors copied from the host (input ids, masks, labels moved
  with `.to("cuda")`), made by deterministic factories (`torch.ones`, `arange`, `full`),
  small buffers modules register, and whatever ops compute from those alone (`propagate`,
  after each op) have one, up to SHADOW_BYTES a storage and SHADOW_BUDGET in all. A read of
  such a tensor answers its real value, so the program takes the branch the GPU would:
  Hugging Face's attention-mask checks, `generate()`'s length limit. A few ops give a known
  result from partly unknown inputs (`x | True`, `x & False`, `where` on a known condition),
  which is how `generate()` learns it reached `max_new_tokens` while its end-of-sequence
  test is unknown.
- Unknown values. A read of any other device tensor gets zeros (`UnknownFloat`/`UnknownInt`
  where a scalar is returned: zeros that remember where they were read) and a `read`
  message with the program's line. `bool()` of an unknown tensor, or a comparison or truth
  test of an unknown scalar, decided a branch: the message says so, and the same branch
  read more than MEMTRACK_ESTIMATE_MAX_REPEATS times stops the program (a loop waiting on a
  value that never comes): a `stopped` message, then the process ends.

Every fact is a message in the record stream, so it survives any ending of the process.
"""

import os
import sys
import weakref

from . import state, transport
from .protocol import MSG_ESTIMATE_BOUND, MSG_ESTIMATE_READ, MSG_ESTIMATE_STOPPED

SHADOW_BYTES = 4 << 20
SHADOW_BUDGET = 256 << 20
# the zeros unknown reads of whole tensors get (`.cpu()`, `.numpy()`) live at once, at most;
# past it a copy to the CPU is a host stand-in (a meta tensor): a 70B model's state dict
# copied to the CPU must not take this machine's memory
PLACEHOLDER_BUDGET = 1 << 30
MAX_REPEATS = 10_000
STOPPED_EXIT = 3

_torch = None
_shadows = {}  # id(meta storage) -> [weakref to it, its values: a CPU UntypedStorage]
_shadow_bytes = [0]
_placeholders = {}  # id(CPU storage) -> (weakref, bytes): zeros handed out for unknown values
_placeholder_bytes = [0]
_branches = {}  # (file, line, what) -> times read
_max_repeats = [MAX_REPEATS]
_info = {}  # id(OpOverload) -> (kind, written argument positions, written names)
_funcs = []  # keeps the OpOverloads of _info alive, so that their ids stay theirs
REGULAR, FACTORY, RANDOM, UNDEFINED, SKIP, UNKNOWN = range(6)
# ops whose output holds no values (uninitialised memory), or that change what a tensor is
_UNDEFINED = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "empty_permuted"}
_SKIP = {"set_", "resize_", "resize_as_", "detach", "_local_scalar_dense"}
# in-place ops whose result does not depend on the destination's old values
_OVERWRITE = {"copy_", "fill_", "zero_"}


# ---- where the program asked


def site():
    """The program's line that asked: the first frame outside torch and the agent."""
    f = sys._getframe(1)
    while f is not None:
        if state.program_file(f.f_code.co_filename):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return "?", 0


def _message(kind, what, where, **more):
    msg = {"t": kind, "file": where[0], "line": where[1], "what": what}
    msg.update(more)
    transport.message(msg)


_reads = [0]  # unknown reads so far: what a computation read is told by the count moving


def reads():
    return _reads[0]


def note_read(what, branch=False, where=None):
    """An unknown value was read (zeros given); a branch read counts towards the limit."""
    _reads[0] += 1
    where = where or site()
    _message(MSG_ESTIMATE_READ, what, where, branch=branch)
    if branch:
        key = (where[0], where[1], what)
        n = _branches.get(key, 0) + 1
        _branches[key] = n
        if n > _max_repeats[0]:
            _stop(what, where, n)


def note_bound(op):
    """A data-dependent op sized as if every element were selected (an upper bound)."""
    _message(MSG_ESTIMATE_BOUND, op, site())


def _stop(what, where, n):
    """A branch read the same unknown value too often: end the process, the run as a whole
    kept, with a message that says where."""
    from . import process

    _message(MSG_ESTIMATE_STOPPED, what, where, count=n, limit=_max_repeats[0])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        process.finish("stopped")
    finally:
        os._exit(STOPPED_EXIT)


# ---- unknown scalars: zeros that remember where they were read


def _tainting(base):
    """A subclass of int or float whose arithmetic keeps the taint and whose comparisons and
    truth tests are branch reads of where the value was read."""

    def wrap(name):
        op = getattr(base, name)

        def method(self, *args):
            try:
                r = op(self, *args)
            except ZeroDivisionError:
                r = base(0)  # a zero read divided by: the value is unknown anyway
            if type(r) in (int, float):
                return _taint(r, self.origin)
            return r

        method.__name__ = name
        return method

    def compare(name):
        op = getattr(base, name)

        def method(self, other):
            note_read(f"a comparison of {self.origin[2]} read at line {self.origin[1]}", True)
            return op(self, other)

        method.__name__ = name
        return method

    ns = {"__hash__": base.__hash__}
    arith = (
        "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow neg pos "
        "abs round trunc floor ceil"
    )
    for n in arith.split():
        ns[f"__{n}__"] = wrap(f"__{n}__")
    for n in "lt le gt ge eq ne".split():
        ns[f"__{n}__"] = compare(f"__{n}__")

    def __bool__(self):
        note_read(f"a truth test of {self.origin[2]} read at line {self.origin[1]}", True)
        return base.__bool__(self)

    ns["__bool__"] = __bool__
    ns["__reduce__"] = lambda self: (base, (base(self),))
    return type(f"Unknown{base.__name__.capitalize()}", (base,), ns)


UnknownFloat = _tainting(float)
UnknownInt = _tainting(int)


def _taint(value, origin):
    v = (UnknownFloat if isinstance(value, float) else UnknownInt)(value)
    v.origin = origin
    return v


def unknown(value, what):
    """`value` (an int or float the program gets for something not known: a timing) as a
    read: it remembers where, as reads of device values do."""
    where = site()
    note_read(what, False, where)
    return _taint(value, (where[0], where[1], what))


def holds_unknown(data, depth=3):
    """Whether `data` (a scalar, or lists and tuples of them) holds a value read that the
    estimate does not have."""
    if isinstance(data, (UnknownFloat, UnknownInt)):
        return True
    if depth and isinstance(data, (list, tuple)):
        return any(holds_unknown(x, depth - 1) for x in data[:1024])
    return False


def unknown_scalar(t, what):
    """A zero of t's kind for an unknown read of t; bool is a branch read."""
    if t.dtype == _torch.bool:
        note_read(what, True)
        return False
    where = site()
    note_read(what, False, where)
    zero = 0.0 if t.is_floating_point() or t.is_complex() else 0
    return _taint(zero, (where[0], where[1], what))


def placeholder_fits(t):
    """Whether zeros for all of t fit what placeholders may take of this machine's memory."""
    return _placeholder_bytes[0] + t.numel() * t.element_size() <= PLACEHOLDER_BUDGET


def _drop_placeholder(k):
    e = _placeholders.pop(k, None)
    if e is not None:
        _placeholder_bytes[0] -= e[1]


def placeholder(t):
    """Zeros on the CPU in t's shape and dtype (what an unknown read of a whole tensor gets),
    marked as such so that copying them back to the device knows nothing."""
    p = _torch.zeros(tuple(t.shape), dtype=t.dtype)
    st = p.untyped_storage()
    k = id(st)
    _placeholders[k] = (weakref.ref(st, lambda w, k=k: _drop_placeholder(k)), st.nbytes())
    _placeholder_bytes[0] += st.nbytes()
    return p


def zeros_list(t, what):
    """tolist() of an unknown tensor: nested zeros that remember where they were read."""
    where = site()
    note_read(what, False, where)
    origin = (where[0], where[1], what)
    zero = 0.0 if t.is_floating_point() else (False if t.dtype == _torch.bool else 0)

    def build(shape):
        if not shape:
            return zero if isinstance(zero, bool) else _taint(zero, origin)
        return [build(shape[1:]) for _ in range(shape[0])]

    return build(tuple(t.shape))


# ---- known values: shadows


def _key(t):
    try:
        return id(t.untyped_storage())
    except Exception:
        return None


def known(t):
    """Whether meta tensor t's values are known."""
    return bool(_shadows) and _key(t) in _shadows


def value(t):
    """t's values as a CPU tensor (a view of its shadow), or None where they are unknown."""
    if not _shadows or not t.is_meta:
        return None
    k = _key(t)
    e = _shadows.get(k)
    if e is None:
        return None
    with _torch._C.DisableTorchFunction():
        return _torch.empty((0,), dtype=t.dtype).set_(
            e[1], t.storage_offset(), t.size(), t.stride()
        )


def _forget(k):
    e = _shadows.pop(k, None)
    if e is not None:
        _shadow_bytes[0] -= e[1].nbytes()


def forget(t):
    """t's values are not known (after all)."""
    _forget(_key(t))


def _fits(t):
    """Whether t's storage may keep its values (asked before any is computed)."""
    try:
        nb = t.untyped_storage().nbytes()
    except Exception:
        return False
    return nb <= SHADOW_BYTES and _shadow_bytes[0] + nb <= SHADOW_BUDGET


def remember(t, values):
    """Keep `values` (a CPU tensor of t's shape) as the values of meta tensor t; nothing where
    t's storage is over the limits."""
    try:
        if not t.is_meta or values.shape != t.shape:
            return
        st = t.untyped_storage()
        nb = st.nbytes()
        if nb > SHADOW_BYTES or _shadow_bytes[0] + nb > SHADOW_BUDGET:
            return
        k = id(st)
        _forget(k)
        with _torch._C.DisableTorchFunction():
            cpu = _torch.UntypedStorage(nb)
            view = _torch.empty((0,), dtype=t.dtype).set_(cpu, t.storage_offset(), t.size(), t.stride())
            view.copy_(values)
        _shadows[k] = [weakref.ref(st, lambda w, k=k: _forget(k)), cpu]
        _shadow_bytes[0] += nb
    except Exception as e:
        transport.internal_error(e)


def from_host(t, host):
    """A device copy `t` of the real CPU tensor `host` (not zeros an unknown read gave)."""
    try:
        if host.device.type != "cpu" or host.is_meta or not _fits(t):
            return
        if _key(host) in _placeholders:
            return
        remember(t, host.detach())
    except Exception as e:
        transport.internal_error(e)


def _info_of(func):
    e = _info.get(id(func))
    if e is not None:
        return e
    kind, written, names = REGULAR, (), ()
    try:
        name = func._opname
        schema = func._schema
        args = schema.arguments
        w = [(i, a.name) for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write]
        written = tuple(i for i, _ in w)
        names = tuple(n for _, n in w)
        if func.namespace != "aten":
            # a collective (its result is the other ranks' too), a custom op: not known
            kind = UNKNOWN
        elif name in _SKIP:
            kind = SKIP
        elif name in _UNDEFINED:
            kind = UNDEFINED
        elif _torch.Tag.nondeterministic_seeded in func.tags:
            kind = RANDOM
        elif not any("Tensor" in str(a.type) for a in args):
            kind = FACTORY
    except Exception:
        kind = SKIP
    _funcs.append(func)
    e = _info[id(func)] = (kind, written, names)
    return e


def _tensors(args, kwargs):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, _torch.Tensor))
        elif isinstance(a, _torch.Tensor):
            yield a
    for a in kwargs.values():
        if isinstance(a, _torch.Tensor):
            yield a


def _swap(a):
    """An argument with each known meta tensor replaced by its values (None: one unknown)."""
    if isinstance(a, _torch.Tensor):
        if not a.is_meta:
            return a
        v = value(a)
        if v is None:
            raise LookupError
        return v
    if isinstance(a, (list, tuple)) and any(isinstance(x, _torch.Tensor) for x in a):
        return type(a)(_swap(x) for x in a)
    if isinstance(a, _torch.device) and a.type == "meta":
        return _torch.device("cpu")
    if a == "meta":
        return "cpu"
    return a


def _outputs(out):
    if isinstance(out, _torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [o for o in out if isinstance(o, _torch.Tensor)]
    return []


def _written(args, kwargs, written, names):
    ts = [args[i] for i in written if i < len(args)]
    ts += [kwargs[n] for n in names if n in kwargs]
    return [t for t in ts if isinstance(t, _torch.Tensor)]


def propagate(func, args, kwargs, out):
    """After op `func` ran on meta tensors: its outputs' values, where its inputs' are known
    (real CPU tensors are); a tensor it overwrote with what is not known loses its values."""
    kind, written, names = _info_of(func)
    if kind == SKIP:
        return
    dest = _written(args, kwargs, written, names) if written else []
    if kind in (RANDOM, UNDEFINED, UNKNOWN):
        for t in dest:
            _forget(_key(t))
        return
    outs = [o for o in _outputs(out) if o.is_meta]
    overwrite = bool(dest) and func._opname in _OVERWRITE
    if kind == REGULAR:
        if any(
            t.is_meta and not known(t) and not (overwrite and t is dest[0])
            for t in _tensors(args, kwargs)
        ):
            if not (func._opname in _PARTLY and _partly_known(func, args, outs)):
                for t in dest:
                    _forget(_key(t))
            return
    # what is computed on the host is the outputs' size: only where they may keep values
    if not outs or not all(_fits(o) for o in outs):
        for t in dest:
            _forget(_key(t))
        return
    if overwrite and not known(dest[0]):
        d = dest[0]
        if d.numel() * d.element_size() != d.untyped_storage().nbytes():
            return
        remember(d, _torch.zeros(d.shape, dtype=d.dtype))
    try:
        with _torch._C.DisableTorchFunction():
            cpu = func(*[_swap(a) for a in args], **{k: _swap(v) for k, v in kwargs.items()})
    except LookupError:
        return
    except Exception:
        # the CPU has no kernel for it, or other rules: its outputs are not known
        for t in dest:
            _forget(_key(t))
        return
    for o, c in zip(outs, _outputs(cpu)):
        if _key(o) not in _shadows:
            remember(o, c)


_PARTLY = {"bitwise_or", "logical_or", "__or__", "bitwise_and", "logical_and", "__and__", "mul", "where"}


def _all(t, want):
    v = value(t) if t.is_meta else t
    return v is not None and v.numel() > 0 and bool((v == want).all())


def _partly_known(func, args, outs):
    """Outputs known from partly unknown inputs: `x | True` is True, `x & False` and `x * 0`
    (integers) are zero, `where` with a known condition takes one side. True if it gave them."""
    name = func._opname
    if not outs or not _fits(outs[0]):
        return False
    out = outs[0]
    ts = [a for a in args[:2] if isinstance(a, _torch.Tensor)]
    if len(ts) != 2 or len(outs) != 1:
        if name == "where" and len(args) == 3 and isinstance(args[0], _torch.Tensor):
            return _where(args, out)
        return False
    exact = not out.is_floating_point() and not out.is_complex()
    for t in ts:
        if tuple(t.shape) != tuple(out.shape):
            continue
        if name in ("bitwise_or", "logical_or", "__or__") and t.dtype == _torch.bool and _all(t, True):
            remember(out, _torch.ones(out.shape, dtype=out.dtype))
            return True
        if name in ("bitwise_and", "logical_and", "__and__", "mul") and exact and _all(t, 0):
            remember(out, _torch.zeros(out.shape, dtype=out.dtype))
            return True
    return False


def _where(args, out):
    cond, a, b = args
    for want, side in ((True, a), (False, b)):
        if tuple(cond.shape) == tuple(out.shape) and _all(cond, want):
            if not isinstance(side, _torch.Tensor):
                remember(out, _torch.full(out.shape, side, dtype=out.dtype))
                return True
            v = value(side) if side.is_meta else side
            if v is not None:
                remember(out, v.expand(out.shape).to(out.dtype))
                return True
    return False


def install(torch):
    global _torch
    _torch = torch
    try:
        _max_repeats[0] = max(1, int(os.environ.get("MEMTRACK_ESTIMATE_MAX_REPEATS", MAX_REPEATS)))
    except ValueError:
        pass
