"""Getting facts to the collector: the Unix socket (connect, frames), the spool (segment files
mapped shared, one-slot and multi-slot records), JSON messages in the record stream, the
flusher thread (time marks, the alive frame) and the agent's own error reports.

The record stream goes into a spool: files in the collector's journal folder
(MEMTRACK_SPOOL), mapped shared, so every record is in the page cache the moment it is
written and survives the process's death (SIGKILL, the OOM killer) with no syscall per op.
A segment is int64 slots: slot 0 holds the next free slot (the reader takes slots 1 up to
it), records follow; a record never straddles two segments. Messages (JSON) are records
too (JSON, byte length, the bytes in slots), so names land before the records using them.
"""

import os
import struct
import sys
import threading
from array import array as _array

from .protocol import FRAME_ALIVE, FRAME_JSON, JSON, MSG_AGENT_ERROR, TIME

FLUSH_SECONDS = 0.05
SPOOL_SLOTS = 1 << 21  # 16 MiB a segment, sparse: only pages written take room

sock = None
_send_lock = threading.Lock()
_spool = [1, 0, None, None]  # next free slot, slots in this segment, its slots, its mapping
# struct packers for records of 1..15 slots, native int64 as the slots are
_packs = [None] + [struct.Struct(f"={n}q").pack_into for n in range(1, 16)]
_pack2 = _packs[2]
_pack6 = _packs[6]
_spool_state = {"pid": None, "name": None, "segment": 0, "dir": None, "mm": []}


# ---- the socket


def connect():
    import socket

    path = os.environ.get("MEMTRACK_SOCKET")
    if not path:
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def open_socket():
    """Connect this process to the collector; False where there is no collector to reach."""
    global sock
    sock = connect()
    return sock is not None


def send_frame(kind, payload):
    sock.sendall(struct.pack("<IB", len(payload), kind) + payload)


def close_socket():
    """Close the connection (the collector sees the process leave)."""
    global sock
    s, sock = sock, None
    try:
        if s is not None:
            s.close()
    except Exception:
        pass


def drop_socket():
    """Forget the connection without shutting it down (a forked child: the parent uses it)."""
    global sock
    sock = None


def encode_json(msg):
    import json

    return json.dumps(msg, separators=(",", ":")).encode()


# ---- the spool


def open_spool(folder):
    """Records of this process go to spool files in `folder` (None: nowhere). A process that
    `exec`s keeps its pid, and its new image finds the spool of the one before: each image
    after the first writes `spool-<pid>.<image>-…` (numbered 1, 2, …) so none is lost."""
    pid = os.getpid()
    _spool_state["dir"] = folder
    _spool_state["pid"] = pid
    _spool_state["name"] = f"spool-{pid}"
    if folder is not None:
        image = 0
        while os.path.exists(os.path.join(folder, f"{_spool_state['name']}-0000.bin")):
            image += 1
            _spool_state["name"] = f"spool-{pid}.{image}"


def forget_spool():
    """A forked child: the spool's pages are shared with the parent, never write there again."""
    _spool[1] = 0
    _spool[2] = None
    _spool[3] = None


def close_spool():
    """The end of an in-process recording: nothing more is written, the mappings go (the
    files keep what was written; a record another thread writes now is dropped)."""
    _spool_state["dir"] = None
    forget_spool()
    mms, _spool_state["mm"] = _spool_state["mm"], []
    for mm in mms:
        try:
            mm.close()
        except Exception:
            pass  # still exported by a view in use: the mapping goes with it


def _open_segment(need):
    """A fresh segment for a record of `need` slots; False where nothing may be written (a
    forked child, no spool, or the file cannot be made): the record is dropped."""
    import mmap

    st = _spool_state
    if st["dir"] is None or st["pid"] != os.getpid():
        return False
    slots = max(SPOOL_SLOTS, need + 1)
    path = os.path.join(st["dir"], f"{st['name']}-{st['segment']:04d}.bin")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, slots * 8)
            mm = mmap.mmap(fd, slots * 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    except OSError as e:
        st["dir"] = None
        text = f"cannot write {path} ({e}); recording stops here"
        sys.stderr.write(f"memtrack: {text}\n")
        # the spool cannot carry it: tell the collector on the socket, so `record` does
        # not end with a silent 0
        try:
            with _send_lock:
                if sock is not None:
                    send_frame(FRAME_JSON, encode_json({"t": MSG_AGENT_ERROR, "text": text}))
        except Exception:
            pass
        return False
    st["segment"] += 1
    st["mm"].append(mm)  # kept mapped: the pages are the data
    mv = memoryview(mm).cast("q")
    mv[0] = 1
    _spool[2] = mv
    _spool[3] = mm
    _spool[0] = 1
    _spool[1] = slots
    return True


def ap(v):
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


def ext(rec):
    """Append a record of several slots."""
    sp = _spool
    p = sp[0]
    n = len(rec)
    q = p + n
    if q > sp[1]:
        if not _open_segment(n):
            return
        p = 1
        q = 1 + n
    sp[0] = q  # claimed first: another thread writing now goes after it
    pack = _packs[n] if n < len(_packs) else None
    if pack is not None:  # one C call instead of a Python loop over the slots
        pack(sp[3], p << 3, *rec)
    else:
        mv = sp[2]
        for x in rec:
            mv[p] = x
            p += 1
    sp[2][0] = q


def ext2(a, b):
    """ext((a, b)) without building the tuple (a storage's death, the hot path's)."""
    sp = _spool
    p = sp[0]
    q = p + 2
    if q > sp[1]:
        if not _open_segment(2):
            return
        p = 1
        q = 3
    sp[0] = q
    _pack2(sp[3], p << 3, a, b)
    sp[2][0] = q


def ext6(a, b, c, d, e, f):
    """ext((a, b, c, d, e, f)) without building the tuple (a new storage and the op that
    made it, the hot path's)."""
    sp = _spool
    p = sp[0]
    q = p + 6
    if q > sp[1]:
        if not _open_segment(6):
            return
        p = 1
        q = 7
    sp[0] = q
    _pack6(sp[3], p << 3, a, b, c, d, e, f)
    sp[2][0] = q


def write_json(msg):
    """A message (JSON) in the stream, in order with the records."""
    b = encode_json(msg)
    n = len(b)
    b += b"\0" * (-n % 8)
    words = _array("q")
    words.frombytes(b)
    if sys.byteorder != "little":
        words.byteswap()
    ext((JSON, n, *words))


message = write_json


def time_mark():
    import time

    ext((TIME, time.clock_gettime_ns(time.CLOCK_MONOTONIC)))


_errors = [0]


def internal_error(e):
    """The agent's own failure, reported (the first three) and never raised: every hook the
    agent installs ends in `except Exception as e: internal_error(e)`."""
    try:
        _errors[0] += 1
        if _errors[0] <= 3:
            import traceback

            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            message({"t": MSG_AGENT_ERROR, "text": text})
    except Exception:
        pass


# ---- the flusher thread


def _flusher():
    global sock
    import time

    # A time mark every 50 ms: where the op stream was at a moment of CLOCK_MONOTONIC, so
    # the collector can place its driver-level memory samples (taken by time) among the ops.
    # An empty frame on the socket tells the collector the process is alive.
    mono = time.clock_gettime_ns
    clock = time.CLOCK_MONOTONIC
    while sock is not None:
        time.sleep(FLUSH_SECONDS)
        ext((TIME, mono(clock)))
        try:
            with _send_lock:
                if sock is not None:
                    send_frame(FRAME_ALIVE, b"")
        except Exception:
            # the collector is gone (killed): keep recording into the spool, which
            # `memtrack record --recover` reads; only the socket goes
            s, sock = sock, None
            try:
                s.close()
            except Exception:
                pass


def start_flusher():
    threading.Thread(target=_flusher, name="memtrack-flush", daemon=True).start()
