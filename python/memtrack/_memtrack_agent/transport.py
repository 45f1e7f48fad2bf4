"""Getting facts to the collector: the Unix socket (connect, frames), the spool (segment files
mapped shared, one-slot and multi-slot records), JSON messages in the record stream, the
flusher thread (time marks, the alive frame) and the agent's own error reports.

The record stream goes into a spool: files in the collector's journal folder
(MEMTRACK_SPOOL), mapped shared, so every record is in the page cache the moment it is
written and survives the process's death (SIGKILL, the OOM killer) with no syscall per op.
A segment is int64 slots: slot 0 holds the next free slot (the reader takes slots 1 up to
it), records follow; a record never straddles two segments. Messages (JSON) are records
too (JSON, byte length, the bytes in slots), so names land before the records using them.

A page of a shared mapping that the disk has no room for kills the process (SIGBUS) when it
is first written, so the room is reserved (fallocate) ahead of the records, RESERVE_SLOTS at
a time: where none is left, recording stops with a message and the program goes on. The
folder is opened once and checked to be this user's alone; segments are made in it
exclusively, never through a link.
"""

import errno
import mmap
import os
import struct
import sys
import threading
from array import array as _array

from .protocol import FRAME_ALIVE, FRAME_JSON, JSON, MSG_AGENT_ERROR, THREAD, TIME

FLUSH_SECONDS = 0.05
SPOOL_SLOTS = 1 << 21  # 16 MiB a segment, sparse: only pages reserved take room
RESERVE_SLOTS = 1 << 17  # 1 MiB of disk reserved at a time, ahead of the records

sock = None
_send_lock = threading.Lock()
_spool = [1, 0, None, None]  # next free slot, end of the reserved slots, its slots, its mapping
# struct packers for records of 1..15 slots, native int64 as the slots are
_packs = [None] + [struct.Struct(f"={n}q").pack_into for n in range(1, 16)]
_pack2 = _packs[2]
_pack6 = _packs[6]
_spool_state = {
    "pid": None,
    "name": None,
    "segment": 0,
    "dir": None,
    "dirfd": None,  # the folder, opened once (or handed by the collector) and checked
    "handed": None,  # the folder's descriptor the collector sent on connecting
    "checked": False,  # whether dirfd was checked to be this user's alone
    "fd": None,  # the current segment's file, for reserving more of it
    "slots": 0,  # the current segment's size in slots
    "mm": [],
}


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
    """Connect this process to the collector; False where there is no collector to reach.
    The collector hands each process the journal folder as it connects (receive_journal)."""
    global sock
    sock = connect()
    if sock is not None:
        _spool_state["handed"] = receive_journal(sock)
    return sock is not None


def receive_journal(s):
    """The journal folder's descriptor the collector sends on connecting (SCM_RIGHTS, with one
    byte): the spool is written through it, never through the folder's path, which another
    user could rename in a shared folder. None where none came."""
    import array
    import socket

    fds = array.array("i")
    try:
        s.settimeout(10)
        _, anc, _, _ = s.recvmsg(1, socket.CMSG_SPACE(fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    except (OSError, AttributeError):
        return None
    finally:
        try:
            s.settimeout(None)
        except OSError:
            pass
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    for extra in fds[1:]:
        os.close(extra)
    return fds[0] if fds else None


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
    st = _spool_state
    st["dir"] = folder
    st["pid"] = pid
    st["name"] = f"spool-{pid}"
    # an exec'd image's descriptors are gone (close-on-exec): it was handed the folder anew
    st["dirfd"], st["handed"] = st.get("handed"), None
    st["checked"] = False
    st["fd"] = None
    if folder is not None:
        image = 0
        while _spool_exists(f"{st['name']}-0000.bin"):
            image += 1
            st["name"] = f"spool-{pid}.{image}"


def _spool_exists(name):
    st = _spool_state
    try:
        if st["dirfd"] is not None:
            os.stat(name, dir_fd=st["dirfd"], follow_symlinks=False)
            return True
        return os.path.lexists(os.path.join(st["dir"], name))
    except OSError:
        return False


def forget_spool():
    """A forked child: the spool's pages are shared with the parent, never write there again."""
    _spool[1] = 0
    _spool[2] = None
    _spool[3] = None


def close_spool():
    """The end of an in-process recording: nothing more is written, the mappings go (the
    files keep what was written; a record another thread writes now is dropped)."""
    st = _spool_state
    st["dir"] = None
    forget_spool()
    mms, st["mm"] = st["mm"], []
    for mm in mms:
        try:
            mm.close()
        except Exception:
            pass  # still exported by a view in use: the mapping goes with it
    for key in ("fd", "dirfd"):
        fd, st[key] = st[key], None
        if fd is not None and st["pid"] == os.getpid():
            try:
                os.close(fd)
            except OSError:
                pass


def _private_folder(folder):
    """The spool folder, opened without following a link, refused unless it is this user's
    and nobody else may write into it (`memtrack record` makes it 0700)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_private(fd, folder)
    except OSError:
        os.close(fd)
        raise
    _spool_state["checked"] = True
    return fd


def _check_private(fd, folder):
    s = os.fstat(fd)
    if s.st_uid != os.geteuid() or s.st_mode & 0o022:
        raise PermissionError(errno.EACCES, "not a folder of this user's alone", folder)


def _reserve(fd, start, end):
    """Room on disk for slots [start, end) of a segment; OSError where there is none."""
    fallocate = getattr(os, "posix_fallocate", None)  # not on macOS
    if fallocate is not None:
        try:
            fallocate(fd, start * 8, (end - start) * 8)
            return
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
    # a filesystem without fallocate: written zeros take their room as well
    zeros = bytes((end - start) * 8)
    at = 0
    while at < len(zeros):
        at += os.pwrite(fd, zeros[at:], start * 8 + at)


MADV_POPULATE_WRITE = 23  # Linux 5.14 (not named by Python's mmap before 3.13)


def _populate(mm, start, end):
    """Slots [start, end) of a mapped segment made present and writable in one call: the
    records written into them then take no page fault each (about one every 500 records;
    on some virtual machines a fault costs more than the records of its page). Where the
    kernel has no such advice, the pages are faulted in as they are written."""
    try:
        low = start * 8 - start * 8 % mmap.PAGESIZE
        mm.madvise(MADV_POPULATE_WRITE, low, end * 8 - low)
    except (OSError, ValueError):
        pass


def _stop(path, e):
    """Recording stops here: say so, and tell the collector on the socket (the spool cannot
    carry it), so `record` does not end with a silent 0. The program goes on."""
    _spool_state["dir"] = None
    text = f"cannot write {path} ({e.strerror or e}); recording stops here"
    sys.stderr.write(f"memtrack: {text}\n")
    try:
        with _send_lock:
            if sock is not None:
                send_frame(FRAME_JSON, encode_json({"t": MSG_AGENT_ERROR, "text": text}))
    except Exception:
        pass


def _room(need):
    """Where a record of `need` slots goes once the reserved slots are used up: more room
    reserved in this segment, else a fresh segment; 0 where nothing may be written (a forked
    child, no spool, no room on disk): the record is dropped."""
    sp = _spool
    st = _spool_state
    p = sp[0]
    if sp[2] is not None and p + need <= st["slots"]:
        if st["dir"] is None or st["pid"] != os.getpid():
            return 0
        end = min(st["slots"], max(sp[1] + RESERVE_SLOTS, p + need))
        try:
            _reserve(st["fd"], sp[1], end)
        except OSError as e:
            _stop(os.path.join(st["dir"], f"{st['name']}-{st['segment'] - 1:04d}.bin"), e)
            return 0
        _populate(sp[3], sp[1], end)
        sp[1] = end
        return p
    return 1 if _open_segment(need) else 0


def _open_segment(need):
    """A fresh segment for a record of `need` slots, its first slots reserved on disk; False
    where nothing may be written."""
    st = _spool_state
    if st["dir"] is None or st["pid"] != os.getpid():
        return False
    slots = max(SPOOL_SLOTS, need + 1)
    reserved = min(slots, max(RESERVE_SLOTS, need + 1))
    name = f"{st['name']}-{st['segment']:04d}.bin"
    try:
        if st["dirfd"] is None:
            st["dirfd"] = _private_folder(st["dir"])
        elif not st["checked"]:
            _check_private(st["dirfd"], st["dir"])
            st["checked"] = True
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(name, flags, 0o600, dir_fd=st["dirfd"])
        try:
            os.ftruncate(fd, slots * 8)
            _reserve(fd, 0, reserved)
            mm = mmap.mmap(fd, slots * 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            _populate(mm, 0, reserved)
        except BaseException:
            os.close(fd)
            raise
    except OSError as e:
        _stop(os.path.join(st["dir"], name), e)
        return False
    old, st["fd"] = st["fd"], fd
    if old is not None:
        os.close(old)
    st["segment"] += 1
    st["slots"] = slots
    st["mm"].append(mm)  # kept mapped: the pages are the data
    mv = memoryview(mm).cast("q")
    mv[0] = 1
    _spool[2] = mv
    _spool[3] = mm
    _spool[0] = 1
    _spool[1] = reserved
    return True


def ap(v):
    """Append a one-slot record (an op on CPU, a marker without arguments)."""
    sp = _spool
    p = sp[0]
    if p >= sp[1]:
        p = _room(1)
        if not p:
            return
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
        p = _room(n)
        if not p:
            return
        q = p + n
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
        p = _room(2)
        if not p:
            return
        q = p + 2
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
        p = _room(6)
        if not p:
            return
        q = p + 6
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

    _time_record(time.clock_gettime_ns(time.CLOCK_MONOTONIC))


# ---- several threads writing (threads.py): one lock, and a THREAD record where the writer
# changes. A single-threaded program keeps the unlocked writers above (the flusher's time
# marks aside); the first other thread recorded switches every writer the agent's modules
# bound to the locked ones for good.

threaded = False
thread_numbers = {}  # threading.get_ident() -> the thread's number (threads.py); else 0
_lock = threading.RLock()  # reentrant: a storage's death may be reported inside a write
_writer = [0]  # the thread whose records were written last
_unlocked = (ap, ext, ext2, ext6)


def _time_record(ns):
    """A time mark (any thread, no THREAD record: it belongs to no thread)."""
    if threaded:
        with _lock:
            _unlocked[1]((TIME, ns))
    else:
        ext((TIME, ns))


def _switch(get=thread_numbers.get, ident=threading.get_ident):
    n = get(ident(), 0)
    if n != _writer[0]:
        _writer[0] = n
        _unlocked[1]((THREAD, n))


def _ap_threaded(v):
    with _lock:
        _switch()
        _unlocked[0](v)


def _ext_threaded(rec):
    with _lock:
        _switch()
        _unlocked[1](rec)


def _ext2_threaded(a, b):
    with _lock:
        _switch()
        _unlocked[2](a, b)


def _ext6_threaded(a, b, c, d, e, f):
    with _lock:
        _switch()
        _unlocked[3](a, b, c, d, e, f)


def go_threaded():
    """From now on every record is written under the lock, after a THREAD record where the
    writing thread changed: rebind the writers wherever the agent's modules bound them."""
    global threaded
    if threaded:
        return
    with _lock:
        threaded = True
        swap = {
            id(old): new
            for old, new in zip(_unlocked, (_ap_threaded, _ext_threaded, _ext2_threaded, _ext6_threaded))
        }
        prefix = __name__.rsplit(".", 1)[0] + "."
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name.startswith(prefix) or name == __name__):
                continue
            for attr, value in list(vars(mod).items()):
                new = swap.get(id(value))
                if new is not None:
                    setattr(mod, attr, new)


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
        _time_record(mono(clock))
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


def start_own_thread(target, name):
    """A daemon thread of the agent's own: marked so, it is never recorded as one of the
    program's (threads.py)."""
    t = threading.Thread(target=target, name=name, daemon=True)
    t._memtrack_own = True
    t.start()


def start_flusher():
    start_own_thread(_flusher, "memtrack-flush")
