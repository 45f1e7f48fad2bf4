"""`memtrack estimate`: which meta storages are the device's memory, and what the program is
told when it asks about that memory.

- A meta storage is the GPU's (device 0, counted with CUDA's 512-byte rounding by ops.py),
  unless it stands for host memory: parameters and buffers a module registers on the CPU
  become meta tensors marked as host (`make_host`), so that building a 7B model does not
  need its 28 GB; moving them to CUDA makes a counted copy, as a real `.cuda()` does.
- cuBLAS's workspaces are allocated where CUDA allocates them (`count_workspace`).
- Every allocation and free of the device goes, in batches, to the allocator model that
  `memtrack estimate` runs beside the program (src/estimate/live.rs, MEMTRACK_ESTIMATE_MODEL),
  so that `torch.cuda.memory_allocated()`, `max_memory_reserved()`, `mem_get_info()` and
  `memory_stats()` answer what CUDA's caching allocator would, peaks since the last reset
  included: the same model, fed the same events in the same order, as the file's series.
"""

import os
import struct
import threading
import weakref
from array import array

from . import ops, transport
from .protocol import OTH, WHY_HOST, WHY_META

_torch = None
# meta storages that are not the device's memory (not counted), by id: HOST stands for a CPU
# tensor; META is a tensor the program made on the meta device itself (deferred
# initialisation: `with torch.device("meta")`, `device="meta"`), which holds no memory anywhere
HOST, META = "host", "meta"
_uncounted = {}  # id(storage) -> (weakref, HOST or META)
_making = [None]  # HOST or META while making such storages

# the live allocator model: (key, bytes) pairs not yet sent, bytes 0 for a free; appended
# from any thread (deaths come where the last reference goes), sent under _lock
_events = array("q")
_FLUSH_PAIRS = 1 << 15
_model = {"sock": None, "failed": False, "path": None, "conf": ""}
# reentrant: a storage's death (a collection) may come while this thread holds it (_sending)
_lock = threading.RLock()
_EVENTS, _QUERY, _RESET, _LIMIT = 1, 2, 3, 4
# the model's answer: allocated, reserved, peak allocated, peak reserved (since the last
# reset), allocation retries, out-of-memory errors, the bytes it may reserve
_ANSWER = struct.Struct("<7Q")


def _kind(t):
    if not _uncounted or not t.is_meta:
        return None
    local = getattr(t, "_local_tensor", None)  # a DTensor: its shard's
    if local is not None:
        t = local
    try:
        e = _uncounted.get(id(t.untyped_storage()))
    except Exception:
        return None
    return None if e is None else e[1]


def is_host(t):
    """A meta tensor standing for a CPU tensor."""
    return _kind(t) == HOST


def is_user_meta(t):
    """A tensor the program made on the meta device itself."""
    return _kind(t) == META


def uncounted_kind(t):
    """HOST or META for a meta tensor that is not the device's memory, else None."""
    return _kind(t)


def _mark(st, kind):
    k = id(st)
    _uncounted[k] = (weakref.ref(st, lambda w, k=k: _uncounted.pop(k, None)), kind)


class making:
    """Storages made inside are not the device's: `kind` (HOST or META)."""

    def __init__(self, kind=HOST):
        self.kind = kind

    def __enter__(self):
        self.was = _making[0]
        _making[0] = self.kind

    def __exit__(self, *exc):
        _making[0] = self.was


def _log(k, nbytes):
    _events.extend((k, nbytes))  # one call: another thread never sees half a pair
    # (not from inside a send: the events would go out before older ones)
    if len(_events) >= 2 * _FLUSH_PAIRS and not _sending[0]:
        _flush()


def _on_death(k, w=None):
    """A device storage died: ops' accounting, then the live model."""
    if k in ops._known:
        _log(k, 0)
    ops._on_del(k, w)


def _device_death(k):
    """ops._death_callback under estimate: every storage ops.py counts is the device's."""
    return lambda w, k=k: _on_death(k, w)


def _new_storage(st, k, t, bw, sample=None):
    """ops._new_storage under estimate: a meta storage is the GPU's (device 0), unless it
    stands for host memory; a real CPU storage is host memory, never counted."""
    if not t.is_meta:
        return False
    if _making[0] is not None or k in _uncounted:
        if _making[0] is not None and k not in _uncounted:
            _mark(st, _making[0])
        return False
    sampled = ops._new_dense(st, k, bw, 0, sample)
    _log(k, ops._known[k][1])
    return sampled


def _new_part(st, k, cat):
    d = st.device
    if d.type != "meta" or k in _uncounted:
        return None
    if _making[0] is not None:
        _mark(st, _making[0])
        return None
    return _add(st, k, cat)


def _add(st, k, cat):
    nb = -(-st.nbytes() // ops.min_alloc) * ops.min_alloc
    ops._known[k] = e = [cat, nb, weakref.ref(st, _device_death(k))]
    ops._ext((ops.ADD, k, cat, 0, nb))
    _log(k, nb)
    return e


def _resized(st, k, e, dev):
    """ops._resized under estimate: the device's storages are meta, whose device index is -1;
    they are CUDA's all the same, counted with its rounding (else every in-place op on one
    would report it shrunk to its exact bytes)."""
    nb = -(-st.nbytes() // ops.min_alloc) * ops.min_alloc
    if nb != e[1]:
        e[1] = nb
        ops._ext((ops.SIZE, k, nb))
        _log(k, 0)  # a new block, to the allocator
        if nb:
            _log(k, nb)


def _install_resize(torch):
    """A resized device storage is a new block to the allocator (FSDP frees and regrows its
    parameters this way); ops.py reports the new size to the file."""
    resize = torch.UntypedStorage.resize_

    def resize_(st, size):
        r = resize(st, size)
        try:
            e = ops._known.get(id(st))
            if e is not None and st.device.type == "meta":
                _log(id(st), 0)
                if e[1]:
                    _log(id(st), e[1])
        except Exception as err:
            transport.internal_error(err)
        return r

    torch.UntypedStorage.resize_ = resize_


# cuBLAS's workspace, made by the first GEMM of each thread's handle (the program's thread
# runs forward, autograd's device thread backward): CUBLAS_WORKSPACE_CONFIG's default, ":4096:8"
# (32 MiB) from compute capability 9.0, ":4096:2:16:8" before; and cuBLASLt's 1 MiB for a GEMM
# with bias (addmm). Kept for the process's life, as the handles keep them.
_GEMMS = ("mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "addbmm", "_scaled_mm")
_LT_GEMMS = ("addmm", "_addmm_activation")
_workspaces = {}  # (backward, "blas"|"lt") -> the meta tensor that stands for it
capability = [(9, 0)]


def _workspace_bytes(kind):
    if kind == "lt":
        return 1 << 20
    conf = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if not conf:
        conf = ":4096:8" if capability[0] >= (9, 0) else ":4096:2:16:8"
    nums = [int(x) for x in conf.split(":") if x.strip().isdigit()]
    return sum(kib * 1024 * n for kib, n in zip(nums[::2], nums[1::2]))


def count_workspace(func, bw):
    name = getattr(func, "_opname", "")
    if name not in _GEMMS:
        return
    for kind in ("blas", "lt") if name in _LT_GEMMS else ("blas",):
        if (bw, kind) in _workspaces:
            continue
        with _torch._C.DisableTorchFunction():
            t = _torch.empty(_workspace_bytes(kind), dtype=_torch.uint8, device="meta")
        _workspaces[(bw, kind)] = t
        st = t.untyped_storage()
        _add(st, id(st), OTH)


# ---- the live allocator model


def _connect():
    m = _model
    if m["sock"] is not None or m["failed"]:
        return m["sock"]
    try:
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(m["path"])
        conf = m["conf"].encode()
        s.sendall(struct.pack("<BI", 0, len(conf)) + conf)
        m["sock"] = s
    except Exception as e:
        m["failed"] = True
        transport.internal_error(RuntimeError(f"the estimate's allocator model: {e}"))
    return m["sock"]


_sending = [False]  # this thread, holding _lock, is sending: a death inside waits its turn


def _send_events():
    """Send the events not yet sent (under _lock); False where the model is out of reach."""
    _sending[0] = True
    try:
        return _send_pending()
    finally:
        _sending[0] = False


def _send_pending():
    s = _connect() if _model["path"] else None
    if s is None:
        del _events[:]
        return False
    try:
        n = len(_events) // 2  # whole pairs (what another thread appends meanwhile stays)
        payload = _events[: 2 * n].tobytes()
        del _events[: 2 * n]
        s.sendall(struct.pack("<BI", _EVENTS, len(payload) // 16) + payload)
        return True
    except Exception as e:
        _model["failed"], _model["sock"] = True, None
        transport.internal_error(RuntimeError(f"the estimate's allocator model: {e}"))
        return False


def _flush():
    with _lock:
        _send_events()


def _recv(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError("the model closed the connection")
        b += chunk
    return b


def figures():
    """The model's figures now: {allocated, reserved, peak_allocated, peak_reserved,
    retries, ooms, limit}; None where the model cannot be reached."""
    with _lock:
        if not _send_events():
            return None
        s = _model["sock"]
        try:
            s.sendall(struct.pack("<BI", _QUERY, 0))
            values = _ANSWER.unpack(_recv(s, _ANSWER.size))
        except Exception as e:
            _model["failed"], _model["sock"] = True, None
            transport.internal_error(RuntimeError(f"the estimate's allocator model: {e}"))
            return None
    keys = ("allocated", "reserved", "peak_allocated", "peak_reserved", "retries", "ooms", "limit")
    return dict(zip(keys, values))


def _command(kind, payload=b"", n=0):
    with _lock:
        if _send_events():
            try:
                _model["sock"].sendall(struct.pack("<BI", kind, n) + payload)
            except Exception as e:
                _model["failed"], _model["sock"] = True, None
                transport.internal_error(e)


def reset_peaks():
    _command(_RESET)


def take_from_limit(nbytes):
    """What the allocator may use shrinks by `nbytes` from now on (NCCL's buffers of a process
    group that began to communicate), as in the file's replay."""
    _command(_LIMIT, struct.pack("<Q", nbytes), 1)


def _after_fork_in_child():
    """A forked child (a DataLoader worker) must not write into its parent's connection."""
    global _lock
    _model["sock"], _model["failed"] = None, True
    del _events[:]
    _lock = threading.RLock()  # another thread of the parent's may have held it at the fork


def live_bytes():
    """What the device's live storages hold (the answer where the model is out of reach)."""
    return sum(e[1] for e in ops._known.values())


def install(torch):
    """Redirect ops.py's storage accounting here (after ops.install)."""
    global _torch
    _torch = torch
    ops._new_storage = _new_storage
    ops._new_part = _new_part
    ops._death_callback = _device_death
    ops._resized = _resized
    ops.why_uncounted = lambda st: WHY_HOST if st.device.type == "cpu" else WHY_META
    _install_resize(torch)
    _model["path"] = os.environ.get("MEMTRACK_ESTIMATE_MODEL") or None
    _model["conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    os.register_at_fork(after_in_child=_after_fork_in_child)
