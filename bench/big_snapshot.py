#!/usr/bin/env python3
"""Write a snapshot of N trace events in bounded memory, for runs at 10 GB.

../shared/bench/gen_data.py holds the whole snapshot in memory (about 3.3 GB a 4M events), so
it cannot write the 37M-event (10 GB) file the snapshot issue asks about. This writes the same
shape opcode by opcode (pickle protocol 4, as `_dump_snapshot` does): every event a fresh
frame list of memo references to frame dicts shared across the file (14-67 deep, mostly C++
frames), free_requested and free_completed sharing one list, the keys in PyTorch's order,
events in APPENDS batches of 1000; the final segments (written first, as dict order puts them)
come from a first pass over the same random sequence. Memory: the live blocks (about 4% of the
steps). Not byte-identical to gen_data.py: no FRAME opcodes, live blocks' frames are lists of
their own; ~190 bytes an event (37M steps: 56M events, 10.5 GB, about 13 minutes).

    python3 bench/big_snapshot.py OUT --events N [--seed S]
"""
import argparse
import random
import struct
import sys

P = struct.pack


def text(s):
    b = s.encode()
    return (b"\x8c" + bytes([len(b)]) if len(b) < 256 else b"X" + P("<I", len(b))) + b + b"\x94"


def get(i):
    return b"h" + bytes([i]) if i < 256 else b"j" + P("<I", i)


def uint(n):
    if n < 256:
        return b"K" + bytes([n])
    if n < 65536:
        return b"M" + P("<H", n)
    if n < 2**31:
        return b"J" + P("<i", n)
    return b"\x8a\x08" + P("<q", n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    rnd = random.Random(a.seed)
    out = open(a.out, "wb", buffering=1 << 24)
    memo = 0

    def memoize():
        nonlocal memo
        memo += 1
        return memo - 1

    w = out.write
    # the live blocks at the end, from a first replay of the same random sequence
    rs = random.Random(a.seed + 1)
    live = []
    addr = 0x7F0000000000
    for _ in range(a.events):
        if live and rs.random() < 0.48:
            live.pop(rs.randrange(len(live)))
            rs.randrange(1500)
        else:
            size = rs.choice((512, 4096, 1 << 20, 2 << 20, 8 << 20, 64 << 20))
            rs.random()
            rs.randrange(1500)
            live.append((addr, size))
            addr += size
    live.sort()

    w(b"\x80\x04}\x94(")
    memoize()
    # frame dicts and stacks, as gen_data.py makes them
    files = [f"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/m{i}.py" for i in range(40)]
    files += [f"/home/user/project/model/layer{i}.py" for i in range(20)]
    cpp = [("??", 0), ("CUDACachingAllocator.cpp", 0), ("python_variable.cpp", 0),
           ("TensorImpl.cpp", 0), ("memory_snapshot.cpp", 0), ("", 0)]
    w(text("segments")); memoize()
    w(b"]\x94"); memoize()
    keys = {}
    frame_ids = []

    def key(k):
        if k in keys:
            return get(keys[k])
        keys[k] = memo
        memoize()
        return text(k)

    # the frame pool, written inside a first segment-less list of frames held by the segments'
    # blocks: one block a live allocation, grouped 64 to a segment as gen_data.py does
    pool = []
    for i in range(3000):
        if rnd.random() < 0.16:
            pool.append((f"forward_{i}", rnd.choice(files), rnd.randrange(1, 2000)))
        else:
            fname, line = rnd.choice(cpp)
            pool.append((f"c10::detail::fn_{i}(at::Tensor const&)", fname, line))
    depths = (14, 14, 15, 17, 20, 24, 24, 24, 24, 28, 32, 35, 40, 42, 42, 55, 66)
    stacks = [[rnd.randrange(3000) for _ in range(rnd.choice(depths) + rnd.randrange(0, 2))]
              for _ in range(1500)]
    frame_memo = [None] * 3000

    def frame(i):
        if frame_memo[i] is not None:
            return get(frame_memo[i])
        name, fname, line = pool[i]
        frame_memo[i] = memo
        memoize()
        return b"}\x94(" + key("name") + text_once(name) + key("filename") + text_once(fname) + key("line") + uint(line) + b"u"

    strings = {}

    def text_once(s):
        if s in strings:
            return get(strings[s])
        strings[s] = memo
        memoize()
        return text(s)

    def frames_list(stack):
        lid = memoize()
        body = b"".join(frame(i) for i in stacks[stack])
        return lid, b"]\x94(" + body + b"e"

    if live:
        w(b"(")
    for k in range(0, len(live), 64):
        group = live[k:k + 64]
        total = sum(s for _, s in group)
        seg = [b"}\x94("]
        memoize()
        seg += [key("device"), uint(0), key("address"), uint(group[0][0]), key("total_size"), uint(total),
                key("allocated_size"), uint(total), key("active_size"), uint(total),
                key("requested_size"), uint(total), key("stream"), uint(0),
                key("segment_type"), text_once("large" if total > (1 << 20) else "small"),
                key("segment_pool_id"), uint(0), key("is_expandable"), b"\x89",
                key("frames"), b"]\x94"]
        memoize()
        seg.append(key("blocks"))
        seg.append(b"]\x94(")
        memoize()
        for a_, s_ in group:
            seg.append(b"}\x94(")
            memoize()
            seg += [key("address"), uint(a_), key("size"), uint(s_), key("requested_size"), uint(s_),
                    key("state"), text_once("active_allocated"), key("frames")]
            _, fl = frames_list(rnd.randrange(1500))
            seg.append(fl)
            seg.append(b"u")
        seg.append(b"eu")
        w(b"".join(seg))
        if (k // 64) % 1000 == 999:
            w(b"e(")
    if live:
        w(b"e")
    w(text("device_traces")); memoize()
    w(b"]\x94(]\x94"); memoize(); memoize()

    # the trace, in batches of 1000
    rs = random.Random(a.seed + 1)
    live = []
    addr = 0x7F0000000000
    t = 1_700_000_000_000_000
    n = 0
    batch = []

    def event(action, addr_, size, frames):
        """An event dict in stream order (memo ids follow the bytes); `frames`: a stack to
        write as a fresh list, or the memo id of a list to fetch. Its bytes and list id."""
        memoize()  # the event dict
        head = b"".join((b"}\x94(", key("action"), text_once(action), key("addr"), uint(addr_),
                         key("size"), uint(size), key("stream"), b"K\x00", key("time_us"), uint(t),
                         key("compile_context"), text_once("N/A"), key("user_metadata"),
                         text_once(""), key("frames")))
        if frames[0] == "get":
            lid, body = frames[1], get(frames[1])
        else:
            lid, body = frames_list(frames[1])
        return head + body + b"u", lid

    def flush():
        nonlocal batch
        if batch:
            w(b"(" + b"".join(batch) + b"e")
            batch = []

    for i in range(a.events):
        t += rnd.randrange(1, 50)
        if live and rs.random() < 0.48:
            a_, s_ = live.pop(rs.randrange(len(live)))
            stack = rs.randrange(1500)
            ev, lid = event("free_requested", a_, s_, ("new", stack))
            batch.append(ev)
            batch.append(event("free_completed", a_, s_, ("get", lid))[0])
        else:
            size = rs.choice((512, 4096, 1 << 20, 2 << 20, 8 << 20, 64 << 20))
            seg = rs.random() < 0.05
            stack = rs.randrange(1500)
            if seg:
                batch.append(event("segment_alloc", addr, 20 << 20, ("new", (stack + 7) % 1500))[0])
            batch.append(event("alloc", addr, size, ("new", stack))[0])
            live.append((addr, size))
            addr += size
        if len(batch) >= 1000:
            flush()
            n += 1
            if n % 5000 == 0:
                print(f"{i + 1:,} of {a.events:,} steps", file=sys.stderr)
    flush()
    w(b"e")  # the list of devices
    w(text("allocator_settings")); memoize()
    w(b"}\x94"); memoize()
    w(text("external_annotations")); memoize()
    w(b"]\x94"); memoize()
    w(b"u.")
    out.close()


if __name__ == "__main__":
    main()
