#!/usr/bin/env python3
"""Write the snapshot file that `gen_data.py snapshot OUT --events N` writes, in bounded memory.

gen_data.py (../shared/bench/gen_data.py) builds the whole snapshot in memory and calls
pickle.dump, about 3.3 GB of RAM per 4M events, so a ~10 GB file (--events 37000000) cannot be
made with it on a 24 GB machine. This script writes the same bytes while holding only the blocks
live at the time (standard library only):

  pass 1 replays gen_data's random walk (same random.Random(seed) calls, in the same order) to
         learn each device's trace length and its final live blocks;
  pass 2 replays it again and streams the pickle, encoding it as CPython's C pickler does for
         pickle.dump(snap, f, 4): MEMOIZE after every str/dict/list/tuple, BINGET/LONG_BINGET
         for objects already written, MARK...APPENDS/SETITEMS batches of 1000 (a one-item list
         gets APPEND), and a new FRAME whenever 64 KiB have gathered before an object is saved.

Segments come before device_traces in the file, so a live block's frame list (the very list of
its alloc event) is first written inside segments and its alloc event refers back to it.

  nice -n 19 python3 bench/gen_big_snapshot.py OUT.pickle --events N [--devices D] [--seed S]

The output is byte-identical to gen_data.py's for the same arguments (checked with cmp for
--events 0 to 4,000,000, --devices 1 to 3, several seeds); if gen_data.py's snapshot()
changes, this must change with it. The script lowers its own priority
to nice 19: it runs for many minutes on machines shared with people benchmarking.
"""
import argparse
import os
import struct
import sys
import time
from array import array
import random

FRAME_SIZE_TARGET = 64 * 1024   # _pickle.c: a frame is committed once it holds this much
FRAME_SIZE_MIN = 4              # a smaller last frame gets no FRAME header
BATCHSIZE = 1000                # _pickle.c: items per MARK ... APPENDS/SETITEMS
SIZES = (512, 4096, 1 << 20, 2 << 20, 8 << 20, 64 << 20)
SEGMENT_ALLOC_SIZE = 20 << 20
POOL_ID = (0, 0)                # one constant tuple in gen_data too, so memoized once
T0 = 1_700_000_000_000_000
FREE, ALLOC = 0, 1


def build_pool(rnd):
    """gen_data.snapshot's frame dicts and stacks, drawn with the same calls in the same order."""
    files = [f"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/m{i}.py" for i in range(40)]
    files += [f"/home/user/project/model/layer{i}.py" for i in range(20)]
    cpp = [("??", 0), ("CUDACachingAllocator.cpp", 0), ("python_variable.cpp", 0),
           ("TensorImpl.cpp", 0), ("memory_snapshot.cpp", 0), ("", 0)]
    frame_pool = []
    for i in range(3000):
        if rnd.random() < 0.16:
            frame_pool.append({"name": f"forward_{i}", "filename": rnd.choice(files),
                               "line": rnd.randrange(1, 2000)})
        else:
            fname, line = rnd.choice(cpp)
            frame_pool.append({"name": f"c10::detail::fn_{i}(at::Tensor const&)",
                               "filename": fname, "line": line})
    depths = (14, 14, 15, 17, 20, 24, 24, 24, 24, 28, 32, 35, 40, 42, 42, 55, 66)
    return [[rnd.choice(frame_pool) for _ in range(rnd.choice(depths) + rnd.randrange(0, 2))]
            for _ in range(1500)]


class LiveBlocks:
    """gen_data's `live` list (append, pop(i) by position) without its O(n) pops: appends fill
    chunks of CHUNK in order; a Fenwick tree over sealed chunks' counts finds position i."""
    CHUNK = 2048

    def __init__(self, max_appends):
        self.cap = max_appends // self.CHUNK + 2
        self.tree = [0] * (self.cap + 1)
        self.top = 1 << (self.cap.bit_length() - 1)
        self.chunks = []     # sealed chunks
        self.tail = []       # chunk being appended to
        self.tail_appended = 0
        self.n = 0

    def append(self, x):
        if self.tail_appended == self.CHUNK:
            self.chunks.append(self.tail)
            i, d, tree = len(self.chunks), len(self.tail), self.tree
            while i <= self.cap:
                tree[i] += d
                i += i & -i
            self.tail, self.tail_appended = [], 0
        self.tail.append(x)
        self.tail_appended += 1
        self.n += 1

    def pop(self, k):
        sealed = self.n - len(self.tail)
        self.n -= 1
        if k >= sealed:
            return self.tail.pop(k - sealed)
        tree, cap, pos, step = self.tree, self.cap, 0, self.top
        while step:
            nxt = pos + step
            if nxt <= cap and tree[nxt] <= k:
                pos = nxt
                k -= tree[nxt]
            step >>= 1
        x = self.chunks[pos].pop(k)
        i = pos + 1
        while i <= cap:
            tree[i] -= 1
            i += i & -i
        return x

    def items(self):
        for c in self.chunks:
            yield from c
        yield from self.tail


def replay(rnd, events, dev, t, live, nstacks):
    """gen_data.snapshot's per-device loop. Yields (FREE, addr, size, t, stack, -1) for a
    free_requested/free_completed pair and (ALLOC, addr, size, t, stack, segment_alloc's stack
    or -1) for an alloc; leaves the last time in live.t."""
    randrange, rand, choice = rnd.randrange, rnd.random, rnd.choice
    ids = range(nstacks)   # choice() draws from len() alone, so indices match gen_data's picks
    seg_addr = 0x7F0000000000 + dev * 0x100000000000
    for _ in range(events):
        t += randrange(1, 50)
        if live.n and rand() < 0.48:
            addr, size, _ = live.pop(randrange(live.n))
            yield FREE, addr, size, t, choice(ids), -1
        else:
            size = choice(SIZES)
            seg_si = choice(ids) if rand() < 0.05 else -1
            si = choice(ids)
            live.append((seg_addr, size, si))
            yield ALLOC, seg_addr, size, t, si, seg_si
            seg_addr += size
    live.t = t


def enc_int(x):
    """save_long in _pickle.c, protocol >= 2."""
    if -0x80000000 <= x <= 0x7FFFFFFF:
        if 0 <= x < 0x100:
            return b"K" + bytes((x,))
        if 0 <= x < 0x10000:
            return b"M" + x.to_bytes(2, "little")
        return b"J" + x.to_bytes(4, "little", signed=True)
    n = (x.bit_length() >> 3) + 1
    data = x.to_bytes(n, "little", signed=True)
    if x < 0 and n > 1 and data[-1] == 0xFF and data[-2] & 0x80:
        data = data[:-1]
    assert len(data) < 256
    return b"\x8a" + bytes((len(data),)) + data


def get_op(idx):
    return b"h" + bytes((idx,)) if idx < 256 else b"j" + idx.to_bytes(4, "little")


class Writer:
    """A protocol-4 stream as _pickle.c writes it. Shared objects (strings, frame dicts, the pool
    id tuple) are memoized by id and kept alive; one-off dicts and lists only advance the memo
    counter, since nothing refers back to them (or the caller keeps their index)."""

    def __init__(self, f, stacks):
        self.f = f
        self.buf = bytearray()   # the open frame
        self.n_memo = 0
        self.memo = {}           # id -> index
        self.keep = []           # memoized objects, so their ids stay theirs
        self.stacks = stacks
        self.bodies = [None] * len(stacks)   # a stack's list items once all are memoized
        self.written = 0

    # -- framing: _Pickler_OpcodeBoundary runs before every save() --
    def boundary(self):
        if len(self.buf) >= FRAME_SIZE_TARGET:
            self.commit()

    def commit(self):
        n = len(self.buf)
        if n == 0:
            return
        if n >= FRAME_SIZE_MIN:
            self.f.write(b"\x95" + n.to_bytes(8, "little"))
            self.written += 9
        self.f.write(self.buf)
        self.written += n
        self.buf.clear()

    def memoize(self):
        self.buf += b"\x94"
        self.n_memo += 1
        return self.n_memo - 1

    def remember(self, obj):
        self.memo[id(obj)] = self.memoize()
        self.keep.append(obj)

    def get(self, obj):
        """BINGET bytes for a memoized object, else None."""
        idx = self.memo.get(id(obj))
        return None if idx is None else get_op(idx)

    # -- lists: batch_list_exact --
    def item_pre(self, i, n):
        if n >= 2 and i % BATCHSIZE == 0:
            self.buf += b"("

    def item_post(self, i, n):
        if n == 1:
            self.buf += b"a"
        elif (i + 1) % BATCHSIZE == 0 or i + 1 == n:
            self.buf += b"e"

    def open_list(self):
        """A fresh list: returns its memo index."""
        self.boundary()
        self.buf += b"]"
        return self.memoize()

    def list_items(self, items):
        n = len(items)
        for i, x in enumerate(items):
            self.item_pre(i, n)
            self.save(x)
            self.item_post(i, n)

    def open_dict(self):
        self.boundary()
        self.buf += b"}"
        self.memoize()

    def save(self, obj):
        self.boundary()
        buf, t = self.buf, type(obj)
        if obj is None:
            buf += b"N"
        elif t is bool:
            buf += b"\x88" if obj else b"\x89"
        elif t is int:
            buf += enc_int(obj)
        elif t is float:
            buf += b"G" + struct.pack(">d", obj)
        elif id(obj) in self.memo:
            buf += get_op(self.memo[id(obj)])
        elif t is str:
            data = obj.encode("utf-8", "surrogatepass")
            assert len(data) < 256
            buf += b"\x8c" + bytes((len(data),)) + data
            self.remember(obj)
        elif t is tuple:
            assert 1 <= len(obj) <= 3
            for x in obj:
                self.save(x)
            self.buf += bytes((0x84 + len(obj),))   # TUPLE1..3 are 0x85..0x87
            self.remember(obj)
        elif t is dict:
            buf += b"}"
            self.remember(obj)
            items = list(obj.items())
            if len(items) == 1:
                self.save(items[0][0])
                self.save(items[0][1])
                self.buf += b"s"
            elif items:
                for b in range(0, len(items), BATCHSIZE):
                    self.buf += b"("
                    for k, v in items[b:b + BATCHSIZE]:
                        self.save(k)
                        self.save(v)
                    self.buf += b"u"
        elif t is list:
            buf += b"]"
            self.remember(obj)
            self.list_items(obj)
        else:
            raise TypeError(f"no encoding for {t.__name__}")

    def body(self, si):
        """The bytes of stack si's list after `]` MEMOIZE, once all its frames are memoized."""
        b = self.bodies[si]
        if b is None:
            gets = [self.get(fd) for fd in self.stacks[si]]
            if None in gets:
                return None
            n = len(gets)
            assert n <= BATCHSIZE
            b = b"(" + b"".join(gets) + b"e" if n >= 2 else b"".join(gets) + (b"a" if n else b"")
            self.bodies[si] = b
        return b

    def fresh_frames(self, si):
        """A fresh list holding stack si's frames; returns its memo index."""
        idx = self.open_list()
        self.list_items(self.stacks[si])
        return idx


class SnapshotWriter(Writer):
    def __init__(self, f, stacks):
        super().__init__(f, stacks)
        self.ev_prefix = {}       # action -> bytes up to the addr value
        self.ev_mid = None
        self.block_parts = None

    # -- a block of segments[].blocks --
    def block(self, addr, size, si):
        """Writes one block dict; returns its frame list's memo index."""
        parts, body = self.block_parts, self.body(si)
        if parts is not None and body is not None:
            p1, p2, p3, p4 = parts
            s = enc_int(size)
            blob = b"".join((p1, enc_int(addr), p2, s, p3, s, p4, body, b"u"))
            if len(self.buf) + len(blob) < FRAME_SIZE_TARGET:   # no frame ends inside it
                self.buf += blob
                self.n_memo += 2
                return self.n_memo - 1
        self.open_dict()
        self.buf += b"("
        for k, v in (("address", addr), ("size", size), ("requested_size", size),
                     ("state", "active_allocated")):
            self.save(k)
            self.save(v)
        self.save("frames")
        idx = self.fresh_frames(si)
        self.buf += b"u"
        if parts is None:
            g = self.get
            self.block_parts = (b"}\x94(" + g("address"), g("size"), g("requested_size"),
                                g("state") + g("active_allocated") + g("frames") + b"]\x94")
        return idx

    def segment(self, dev, group, memo_out, at):
        self.open_dict()
        self.buf += b"("
        total = sum(s for _, s, _ in group)
        for k, v in (("device", dev), ("address", group[0][0]), ("total_size", total),
                     ("allocated_size", total), ("active_size", total),
                     ("requested_size", total), ("stream", 0),
                     ("segment_type", "large" if total > (1 << 20) else "small"),
                     ("segment_pool_id", POOL_ID), ("is_expandable", False)):
            self.save(k)
            self.save(v)
        self.save("frames")
        self.open_list()
        self.save("blocks")
        self.open_list()
        n = len(group)
        for j, (a, s, si) in enumerate(group):
            self.item_pre(j, n)
            memo_out[at + j] = self.block(a, s, si)
            self.item_post(j, n)
        self.buf += b"u"

    # -- an event of device_traces --
    def event(self, action, addr, size, t, si, frames_idx):
        """Writes one event dict; its frames are stack si's in a fresh list, or (frames_idx not
        None) the list already written at that memo index. Returns the frame list's index."""
        pre, mid = self.ev_prefix.get(action), self.ev_mid
        if pre is not None and mid is not None:
            if frames_idx is None:
                body = self.body(si)
                frames = None if body is None else b"]\x94" + body
            else:
                frames = get_op(frames_idx)
            if frames is not None:
                blob = b"".join((pre, enc_int(addr), mid[0], enc_int(size), mid[1],
                                 enc_int(t), mid[2], frames, b"u"))
                if len(self.buf) + len(blob) < FRAME_SIZE_TARGET:   # no frame ends inside it
                    self.buf += blob
                    if frames_idx is None:
                        self.n_memo += 2
                        return self.n_memo - 1
                    self.n_memo += 1
                    return frames_idx
        self.open_dict()
        self.buf += b"("
        for k, v in (("action", action), ("addr", addr), ("size", size), ("stream", 0),
                     ("time_us", t), ("compile_context", "N/A"), ("user_metadata", "")):
            self.save(k)
            self.save(v)
        self.save("frames")
        if frames_idx is None:
            frames_idx = self.fresh_frames(si)
        else:
            self.boundary()
            self.buf += get_op(frames_idx)
        self.buf += b"u"
        g = self.get
        if pre is None:
            self.ev_prefix[action] = b"}\x94(" + g("action") + g(action) + g("addr")
        if mid is None:
            self.ev_mid = (g("size"), g("stream") + b"K\x00" + g("time_us"),
                           g("compile_context") + g("N/A") + g("user_metadata") + g("")
                           + g("frames"))
        return frames_idx


class Progress:
    def __init__(self, label, total):
        self.label, self.total, self.t0 = label, max(total, 1), time.monotonic()

    def __call__(self, done, extra=""):
        el = time.monotonic() - self.t0
        eta = el / done * (self.total - done) if done else 0
        print(f"{self.label}: {done:,}/{self.total:,} ({100 * done / self.total:.1f}%) "
              f"{el:.0f}s elapsed, ~{eta:.0f}s left{extra}", file=sys.stderr, flush=True)


def snapshot(path, events, devices, seed):
    every = 1 << 20
    # pass 1: trace lengths and final live blocks
    rnd = random.Random(seed)
    nstacks = len(build_pool(rnd))
    t, lengths, finals = T0, [], []
    prog = Progress("pass 1/2 (replay)", events * devices)
    for dev in range(devices):
        live, n_events = LiveBlocks(events), 0
        for i, (kind, _, _, _, _, seg_si) in enumerate(replay(rnd, events, dev, t, live, nstacks)):
            n_events += 1 if kind == ALLOC and seg_si < 0 else 2
            if i % every == every - 1:
                prog(dev * events + i + 1, f", {live.n:,} live")
        t = live.t
        lengths.append(n_events)
        finals.append(list(live.items()))   # in address order already, as after gen_data's sort
        del live
    prog(events * devices)

    # pass 2: the file
    rnd = random.Random(seed)
    stacks = build_pool(rnd)
    tmp = path + ".part"
    with open(tmp, "wb", buffering=1 << 20) as f:
        w = SnapshotWriter(f, stacks)
        f.write(b"\x80\x04")   # PROTO 4 comes before the first frame
        w.open_dict()
        w.buf += b"("
        w.save("segments")
        w.open_list()
        n_segments = sum((len(b) + 63) // 64 for b in finals)
        live_addrs, live_memo, k = [], [], 0
        prog = Progress("pass 2/2 segments (blocks)", sum(len(b) for b in finals))
        for dev, blocks in enumerate(finals):
            memo = array("q", bytes(8 * len(blocks)))
            for at in range(0, len(blocks), 64):
                w.item_pre(k, n_segments)
                w.segment(dev, blocks[at:at + 64], memo, at)
                w.item_post(k, n_segments)
                k += 1
                if at % (64 * 4096) == 0 and at:
                    prog(at)
            live_addrs.append(array("Q", (a for a, _, _ in blocks)))
            live_memo.append(memo)
            finals[dev] = None   # keep only addresses and memo indices from here on
        del finals

        w.save("device_traces")
        w.open_list()
        rnd_t = T0
        prog = Progress("pass 2/2 traces (steps)", events * devices)
        for dev in range(devices):
            w.item_pre(dev, devices)
            w.open_list()
            n, j = lengths[dev], 0       # j: events written to this trace
            addrs, memo, nxt = live_addrs[dev], live_memo[dev], 0
            live = LiveBlocks(events)
            for i, (kind, addr, size, tt, si, seg_si) in enumerate(
                    replay(rnd, events, dev, rnd_t, live, nstacks)):
                if kind == FREE:
                    w.item_pre(j, n)
                    idx = w.event("free_requested", addr, size, tt, si, None)
                    w.item_post(j, n)
                    w.item_pre(j + 1, n)
                    w.event("free_completed", addr, size, tt, si, idx)
                    w.item_post(j + 1, n)
                    j += 2
                else:
                    if seg_si >= 0:
                        w.item_pre(j, n)
                        w.event("segment_alloc", addr, SEGMENT_ALLOC_SIZE, tt, seg_si, None)
                        w.item_post(j, n)
                        j += 1
                    frames_idx = None
                    if nxt < len(addrs) and addrs[nxt] == addr:   # live at the end
                        frames_idx = memo[nxt]
                        nxt += 1
                    w.item_pre(j, n)
                    w.event("alloc", addr, size, tt, si, frames_idx)
                    w.item_post(j, n)
                    j += 1
                if i % every == every - 1:
                    prog(dev * events + i + 1, f", {w.written / 1e9:.2f} GB written")
            assert j == n and nxt == len(addrs), "pass 2 diverged from pass 1"
            rnd_t = live.t
            live_addrs[dev] = live_memo[dev] = None
            del live
            w.item_post(dev, devices)
        prog(events * devices)

        w.save("allocator_settings")
        w.save({"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                "garbage_collection_threshold": 0.0,
                "expandable_segments": False,
                "pinned_num_register_threads": 1,
                "release_lock_on_cudamalloc": False,
                "pinned_use_cuda_host_register": False,
                "roundup_power2_divisions": {"1": 0, "2": 0}})
        w.save("external_annotations")
        w.save([])
        w.buf += b"u."   # SETITEMS of the top dict, STOP
        w.commit()
    os.replace(tmp, path)
    return w.written + 2


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.nice(19 - os.nice(0))
    t0 = time.monotonic()
    size = snapshot(args.out, args.events, args.devices, args.seed)
    print(f"wrote {args.out}: {size:,} bytes in {time.monotonic() - t0:.0f}s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
