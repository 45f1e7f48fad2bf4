"""The storages behind a tensor, whatever it is (sparse, nested, functorch's wrappers,
subclasses, fake and meta), and the note saying how one that is not a dense storage was
measured, if at all (ops.py counts what these give; the file's `unmeasured` says the notes).
Never raises into the program.
"""

import weakref

from .protocol import NOTE, WHY_ERROR, WHY_NESTED, WHY_NO_STORAGE, WHY_SPARSE
from .transport import ext as _ext
from .transport import internal_error as _internal_error

_noted = {}  # id(tensor) -> [weakref, why, category]: tensors noted, each counted once
_wref = weakref.ref

# bound by bind()
_Tensor = None
_Parameter = None
_sparse_parts = {}  # sparse layout -> the methods giving its index and value tensors
_is_wrapped = None  # functorch: is this a grad/vmap/jvp wrapper, and its unwrapped tensor
_unwrap = None
_is_traceable = None  # torch.utils._python_dispatch.is_traceable_wrapper_subclass
_no_dispatch = None  # torch._C._DisableTorchDispatch: read a tensor's parts unseen by modes


def forget():
    _noted.clear()


def parts(t):
    """(storages, why): the untyped storages holding a tensor's memory, and None for a tensor
    that is its storage, or the WHY_* saying how it was measured instead (sparse: by its
    indices' and values' storages; no storage, or an error: not at all). Never raises. A meta
    or fake tensor's storage is listed (it is the tensor's), and recognised when it would be
    counted (_new_storage, _new_part)."""
    if type(t) is _Tensor or type(t) is _Parameter:
        try:
            return (t.untyped_storage(),), None
        except Exception:
            pass
    try:
        return _unusual(t)
    except Exception as e:
        _internal_error(e)
        return (), WHY_ERROR


def storages(t):
    """The untyped storages behind a tensor (parts() without the why)."""
    return parts(t)[0]


def _unusual(t):
    """parts() of anything but a plain dense tensor: through functorch's wrappers (grad,
    vmap), traceable wrapper subclasses (DTensor, jagged nested tensors), sparse layouts
    (their index and value tensors, read with dispatch off so that no mode sees the read)
    and nested tensors (their buffer)."""
    todo, out, why = [t], [], None
    while todo:
        x = todo.pop()
        if _is_wrapped is not None and _is_wrapped(x):
            todo.append(_unwrap(x))
            continue
        if _is_traceable(x):
            attrs, _ = x.__tensor_flatten__()
            for a in attrs:
                v = getattr(x, a, None)
                if isinstance(v, _Tensor):
                    todo.append(v)
            continue
        layout = x.layout
        sparse = _sparse_parts.get(layout)
        if sparse is not None:
            with _no_dispatch():
                todo.extend(getattr(x, m)() for m in sparse)
            why = why if why is not None else WHY_SPARSE
            continue
        try:
            st = x.untyped_storage()
            # a wrapper subclass's storage is a placeholder: it holds nothing, and reading its
            # pointer raises; a fake tensor's is a meta storage, whose pointer torch warns about
            if st.device.type != "meta":
                st.data_ptr()
        except Exception:
            if x.is_nested:
                with _no_dispatch():
                    todo.append(x.values())
                why = why if why is not None else WHY_NESTED
            else:
                why = WHY_NO_STORAGE
            continue
        if all(st is not o for o in out):
            out.append(st)
    return out, why


def note(t, why, cat):
    """Say that tensor t (now in category cat) was not measured as one dense storage, and why;
    each tensor is counted once, in its latest category."""
    k = id(t)
    e = _noted.get(k)
    if e is not None and e[0]() is t:
        if e[2] != cat:
            _ext((NOTE, e[1], cat, e[2]))
            e[2] = cat
        return
    try:
        w = _wref(t, lambda w, k=k: _forget_note(k))
    except TypeError:  # no weak reference: counted each time it is met
        _ext((NOTE, why, cat, -1))
        return
    _noted[k] = [w, why, cat]
    _ext((NOTE, why, cat, -1))


def _forget_note(k):
    try:
        _noted.pop(k, None)
    except Exception:  # interpreter shutdown
        pass


def bind(torch):
    global _is_wrapped, _unwrap, _is_traceable, _no_dispatch, _Tensor, _Parameter
    _Tensor = torch.Tensor
    _Parameter = torch.nn.Parameter
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    _is_traceable = is_traceable_wrapper_subclass
    _no_dispatch = torch._C._DisableTorchDispatch
    functorch = getattr(torch._C, "_functorch", None)
    _is_wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None)
    _unwrap = getattr(functorch, "get_unwrapped", None)
    if _unwrap is None:
        _is_wrapped = None
    for name, methods in (
        ("sparse_coo", ("_indices", "_values")),
        ("sparse_csr", ("crow_indices", "col_indices", "values")),
        ("sparse_bsr", ("crow_indices", "col_indices", "values")),
        ("sparse_csc", ("ccol_indices", "row_indices", "values")),
        ("sparse_bsc", ("ccol_indices", "row_indices", "values")),
    ):
        layout = getattr(torch, name, None)
        if layout is not None:
            _sparse_parts[layout] = methods
