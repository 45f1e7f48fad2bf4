"""--cycles: reference cycles that hold tensors, found as torch.utils.viz._cycles finds them.

A gc callback turns on DEBUG_SAVEALL when a collection starts, so what it finds unreachable
lands in gc.garbage instead of being freed. When the collection found something, a one-shot
profile hook runs right after it (the callback itself may not start a collection): it
collects everything else that is garbage, describes the objects that lead to a tensor (their
references labelled as _cycles.annotated_references labels them), sends that, and frees the
garbage with a last collection. Collections that find nothing cost one callback.
"""

import gc
import os
import sys

from . import ops, state
from .protocol import CYCLE, MSG_CYCLES
from .transport import ext, internal_error, write_json

MAX_CYCLE_NODES = 300
MAX_CYCLE_REPORTS = 200

watcher = None  # the CycleWatcher, once started
_reports = 0  # collections reported


def stop():
    """Nothing more to report (the process ends, or is a forked child)."""
    if watcher is not None:
        watcher.on = False


def watch(torch):
    """Start watching the garbage collector."""
    global watcher
    watcher = CycleWatcher(torch, state.backend == "cuda")
    gc.callbacks.append(watcher.callback)


class CycleWatcher:
    """The gc callback and the profile hook that runs right after a collection that found
    garbage."""

    def __init__(self, torch, cuda):
        self.torch = torch
        self.cuda = cuda
        self.on = True
        self.busy = False
        self.debug = 0  # gc's debug flags when the collection started
        self.generation = 2
        self.prev = None  # the profile function the hook replaces for one event

    def is_tensor(self, obj):
        torch = self.torch
        try:
            if not isinstance(obj, torch.Tensor):
                return False
            dev = obj.device.type
            if dev == "meta":
                return False
            if self.cuda and dev != "cuda":
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

    def callback(self, phase, info):
        if not self.on or self.busy:
            return
        try:  # inline, not a call: after() recognises the return from this frame
            if phase == "start":
                self.debug = gc.get_debug()
                if not self.debug & gc.DEBUG_SAVEALL:  # the program's own SAVEALL: hands off
                    gc.set_debug(self.debug | gc.DEBUG_SAVEALL)
                return
            debug = self.debug
            if debug & gc.DEBUG_SAVEALL:
                return
            if not gc.garbage:
                gc.set_debug(debug)
                return
            # The collector is still running (gc.collect() would do nothing): continue at
            # the first profile event after this callback has returned.
            self.busy = True
            self.generation = info.get("generation", 2)
            self.prev = sys.getprofile()
            sys.setprofile(self.after)
        except Exception as e:
            internal_error(e)

    def after(self, frame, event, arg):
        if frame is not None and frame.f_code is CycleWatcher.callback.__code__:
            return None  # the return from the callback, still inside the collection
        prev = self.prev
        sys.setprofile(prev)
        debug = self.debug
        generation = self.generation
        try:
            if generation != 2:
                gc.collect()  # still saving: whatever else is garbage is reported too
            garbage = list(gc.garbage)
            gc.garbage.clear()
            gc.set_debug(debug)
            if any(self.is_tensor(o) for o in garbage):
                report(self.torch, garbage, generation, self.is_tensor)
            del garbage
            gc.collect()  # now free what was saved
        except Exception as e:
            gc.set_debug(debug)
            internal_error(e)
        finally:
            self.busy = False
        return prev(frame, event, arg) if prev is not None else None


def report(torch, garbage, generation, is_tensor):
    import gc
    import weakref

    global _reports
    if _reports >= MAX_CYCLE_REPORTS:
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
    _reports += 1
    cid = _reports
    write_json(
        {
            "t": MSG_CYCLES,
            "id": cid,
            "generation": generation,
            "garbage": len(objs),
            "omitted": omitted,
            "nodes": nodes,
            "edges": edges,
        }
    )
    ext((CYCLE, cid))


def _tensor_facts(t, stacks):
    dev = t.device
    try:
        sts = ops.storages(t)  # a sparse tensor's indices and values, a subclass's parts
        nb = sum(st.nbytes() for st in sts)
        ptr = sts[0].data_ptr() if len(sts) == 1 and sts[0].device.type != "meta" else 0
    except Exception:
        nb, ptr = 0, 0
    if dev.type == "cuda":
        nb = -(-nb // ops.min_alloc) * ops.min_alloc
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
