#!/usr/bin/env python3
"""What a compiled per-op observer costs on the LSTMCell loop of bench/record_overhead.py
(about 1,000 small ops a step), side by side with plain, a do-nothing TorchDispatchMode and
torch.profiler(profile_memory=True). Observer variants (observer.cpp):

  A     RecordFunction start callback that only counts ops (thread-local callback)
  B     end callback with needsOutputs: a 24-byte record per output tensor (storage ptr,
        nbytes, interned op name) into a preallocated ring; CUDA allocator stats per op where
        a CUDA allocator is initialized
  B-glb B registered with addGlobalCallback instead of addThreadLocalCallback
  C     B plus a MemoryReportingInfoBase pushed as PROFILER_STATE: a record per alloc/free
  D     B plus global module forward pre/post hooks (Python) pushing/popping id(module)
        into the same ring through a pybind11 call
  C+D   C plus the hooks: the whole proposed design
  S+C+D C+D with a start record per op too (op name, sequence number), which attributing an
        allocation to the op that made it needs (end records come after nested ops' records)

    python bench/observer_probe/probe.py                 # timings, 3 interleaved rounds
    python bench/observer_probe/probe.py --check         # what the callbacks see (no timing)
    python bench/observer_probe/probe.py --cold          # also time a cold compile

Each cell runs in a fresh process: load the extension (warm cache), install the observer,
build the model, 3 warm-up steps, then 7 timed blocks; a block's figure is CPU time of the
process per step. Per cell: the median over rounds of each process's median block, and the
fastest block seen.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
MODES = ["plain", "dispatch-nop", "profiler", "A", "B", "B-glb", "C", "D", "C+D", "S+C+D"]
from record_overhead import FLOORS  # noqa: E402 - issue 26's slowdown floors per model


def hooks(ext):
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    push, pop = ext.module_push, ext.module_pop
    register_module_forward_pre_hook(lambda m, args: push(id(m)))
    register_module_forward_hook(lambda m, args, out: pop(id(m)))


def start(mode):
    """Installs what `mode` measures; returns (extension or None, extension load seconds)."""
    ext, load_s = None, None
    if mode == "dispatch-nop":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Nop(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        Nop().__enter__()
    elif mode == "profiler":
        from torch.profiler import ProfilerActivity, profile

        profile(activities=[ProfilerActivity.CPU], profile_memory=True).__enter__()
    elif mode != "plain":
        import observer

        ext, load_s = observer.load()
        variant = {"A": "A", "S+C+D": "S"}.get(mode, "B")
        ext.install(variant, global_=mode == "B-glb", memory=2 if "C" in mode else 0)
        if "D" in mode:
            hooks(ext)
    return ext, load_s


def worker(mode, model_name, steps, threads):
    import torch
    from record_overhead import build

    torch.set_num_threads(threads)
    ext, load_s = start(mode)
    model, opt, loss_fn, x, y = build(model_name)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    dispatch_ops = None
    if mode == "plain":  # the ops a TorchDispatchMode sees, for comparison with RecordFunction's
        from torch.utils._python_dispatch import TorchDispatchMode

        class Count(TorchDispatchMode):
            n = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                Count.n += 1
                return func(*args, **(kwargs or {}))

        with Count():
            step()
        dispatch_ops = Count.n
    if ext:
        ext.reset()
    blocks, per = 7, max(1, steps // 7)
    cpu = []
    for _ in range(blocks):
        c = time.process_time()
        for _ in range(per):
            step()
        cpu.append((time.process_time() - c) / per)
    st = ext.stats() if ext else {}
    n = blocks * per
    print("OBSERVER_PROBE " + json.dumps({
        "median_s": statistics.median(cpu), "min_s": min(cpu), "load_s": load_s,
        "ops_per_step": st.get("ops", 0) / n, "records_per_step": st.get("records", 0) / n,
        "allocs_per_step": st.get("allocs", 0) / n, "cuda_stats": st.get("cuda_stats"),
        "dispatch_ops_per_step": dispatch_ops,
    }))


def run_cell(args, mode):
    cmd = [args.python, os.path.abspath(__file__), "--worker", mode, "--model", args.model,
           "--steps", str(args.steps),
           "--threads", str(args.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("OBSERVER_PROBE "):
            return json.loads(line[len("OBSERVER_PROBE "):])
    raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")


def cold_compile(args):
    """Seconds load() takes in a fresh build directory (a compile), then the median of three
    warm load() (ninja finds nothing to do, then dlopen), then the median of three imports of
    the built .so as a prebuilt module would be imported (no cpp_extension at all); each in a
    fresh process, after `import torch`."""
    d = tempfile.mkdtemp(prefix="observer-cold-")
    env = dict(os.environ, MEMTRACK_OBSERVER_BUILD=d)
    load = ("import sys; sys.path.insert(0, %r); import torch, observer; "
            "print('LOAD_S', observer.load()[1])" % HERE)
    prebuilt = ("import sys, time; import torch; t = time.perf_counter(); "
                "sys.path.insert(0, %r); import memtrack_observer_probe; "
                "print('LOAD_S', time.perf_counter() - t)" % d)

    def one(code):
        p = subprocess.run([args.python, "-c", code], capture_output=True, text=True, env=env)
        return float(p.stdout.split("LOAD_S")[1])

    cold = one(load)
    warm = statistics.median(one(load) for _ in range(3))
    pre = statistics.median(one(prebuilt) for _ in range(3))
    shutil.rmtree(d, ignore_errors=True)
    return cold, warm, pre


# ---------------------------------------------------------------------------------------
# --check: what the callbacks and the memory report see; each in a fresh process, since a
# wrong guess about the profiler slot may abort the interpreter.

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def one_step():
    from record_overhead import build

    model, opt, loss_fn, x, y = build("lstmcell")
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()


def seen(ext, fn):
    ext.reset()
    fn()
    return ext.stats()


@check
def scopes():
    """Forward and backward ops, and ops on another Python thread: thread-local vs global."""
    import torch

    import observer

    ext, _ = observer.load()
    out = {}
    for glb in (False, True):
        ext.install("A", global_=glb)
        s1 = seen(ext, one_step)
        t = threading.Thread(target=lambda: torch.ones(4).add(1).sum())
        s2 = seen(ext, lambda: (t.start(), t.join()))
        ext.uninstall()
        out["global" if glb else "thread-local"] = {
            "ops in a step": s1["ops"], "of which backward nodes": s1["backward_ops"],
            "ops off the main thread in a step": s1["other_thread_ops"],
            "ops seen from a threading.Thread doing 3 ops": s2["ops"],
        }
    return out


@check
def allocations():
    """Does the CPU allocator report to a MemoryReportingInfoBase pushed as PROFILER_STATE?"""
    import torch

    import observer

    ext, _ = observer.load()
    before = torch.empty(1 << 20)  # allocated before the push: its free has no known size
    ext.install("B", memory=2)
    s = seen(ext, one_step)
    a = seen(ext, lambda: torch.empty(1000).add_(1))
    tail = ext.tail(8)
    ext.reset()
    del before
    f = ext.stats()
    t = threading.Thread(target=lambda: torch.empty(5000))
    s_thr = seen(ext, lambda: (t.start(), t.join()))
    ext.uninstall()
    return {
        "a step: ops, allocs, frees, alloc bytes": [s["ops"], s["allocs"], s["frees"], s["alloc_bytes"]],
        "torch.empty(1000).add_(1): allocs, frees, bytes": [a["allocs"], a["frees"], a["alloc_bytes"]],
        "free of a tensor allocated before the push: frees": f["frees"],
        "allocs on a threading.Thread (1 tensor)": s_thr["allocs"],
        "last records (kind, name, a, b)": [list(r) for r in tail],
    }


def profiler_with(memory):
    import torch

    import observer

    ext, _ = observer.load()
    ext.install("B", memory=memory)
    res = {"torch.autograd._profiler_enabled()": torch.autograd._profiler_enabled()}
    try:
        with torch.profiler.profile(profile_memory=True) as prof:
            torch.ones(10).add(1)
        res["profiler inside"] = f"ran, {len(prof.events())} events"
    except Exception as e:  # noqa: BLE001 - reported, not handled
        res["profiler inside"] = f"raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    ext.reset()
    torch.empty(100)
    res["allocs seen after the profiler"] = ext.stats()["allocs"]
    try:
        ext.uninstall()
        res["uninstall"] = "ok"
    except Exception as e:  # noqa: BLE001
        res["uninstall"] = f"raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return res


@check
def profiler_with_raw_slot():
    """The profiler reads the same PROFILER_STATE slot and static_casts what it finds to its
    ProfilerStateBase: a bare MemoryReportingInfoBase there, then the user's torch.profiler"""
    return profiler_with(1)


@check
def profiler_with_state_slot():
    """The same with our reporter derived from ProfilerStateBase, config Disabled"""
    return profiler_with(2)


def run_checks(args):
    for name in CHECKS:
        p = subprocess.run([args.python, os.path.abspath(__file__), "--check-one", name],
                           capture_output=True, text=True)
        print(f"== {name}: {CHECKS[name].__doc__.strip()}")
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("CHECK ")]
        if line:
            for k, v in json.loads(line[0][6:]).items():
                print(f"   {k}: {v}")
        else:
            err = (p.stderr.strip().splitlines() or ["no output"])[-3:]
            print(f"   process died (rc {p.returncode}): " + " | ".join(err))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--check-one", help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help="what the callbacks see; no timing")
    ap.add_argument("--cold", action="store_true", help="also time a cold compile")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--model", default="lstmcell", help="a model of bench/record_overhead.py")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.model, args.steps, args.threads)
    if args.check_one:
        print("CHECK " + json.dumps(CHECKS[args.check_one](), default=str))
        return
    if args.check:
        return run_checks(args)
    import observer

    observer.load()  # compile once up front if the cache is cold
    modes = args.modes.split(",")
    res = {m: [] for m in modes}
    for r in range(args.rounds):
        for m in modes:
            res[m].append(run_cell(args, m))
            print(f"round {r + 1}: {m:12} {res[m][-1]['median_s'] * 1e3:7.2f} ms cpu/step",
                  file=sys.stderr)
    med = {m: statistics.median(x["median_s"] for x in v) for m, v in res.items()}
    low = {m: min(x["min_s"] for x in v) for m, v in res.items()}
    base, base_low = med["plain"], low["plain"]
    dops = res["plain"][-1].get("dispatch_ops_per_step") if "plain" in res else None
    print(f"\n{args.model}, CPU time per step (torch threads {args.threads}); median over "
          f"{args.rounds} rounds of each process's median of 7 blocks; fastest block in brackets\n")
    print(f"{'mode':12} {'ms/step':>8} {'x plain':>8} {'[fastest':>9} {'x]':>6} "
          f"{'ops/step':>9} {'records/step':>13} {'allocs/step':>12} {'load s':>7}")
    for m in modes:
        v = res[m][-1]
        load = statistics.median(x["load_s"] for x in res[m]) if v["load_s"] is not None else None
        print(f"{m:12} {med[m] * 1e3:8.2f} {med[m] / base:7.2f}x {low[m] * 1e3:9.2f} "
              f"{low[m] / base_low:5.2f}x {v['ops_per_step'] or 0:9.0f} "
              f"{v['records_per_step'] or 0:13.0f} {v['allocs_per_step'] or 0:12.0f} "
              + (f"{load:7.3f}" if load is not None else f"{'-':>7}"))
    print(f"(ops/step counts RecordFunction calls, composite ops and autograd nodes included; "
          f"a TorchDispatchMode sees {dops} ops a step)")
    cuda = {x.get("cuda_stats") for v in res.values() for x in v} - {None}
    print(f"\nCUDA allocator stats read per op: {'yes' if True in cuda else 'no (no CUDA allocator initialized)'}")
    if "C+D" in med and args.model in FLOORS:
        floor = FLOORS[args.model]
        print(f"whole design (C+D): {med['C+D'] / base:.2f}x, issue 26's floor for "
              f"{args.model} {floor}x: " + ("ok" if med["C+D"] / base <= floor else "OVER"))
    if args.cold:
        cold, warm, pre = cold_compile(args)
        print(f"\nextension: cpp_extension.load() cold (compile) {cold:.1f} s wall, warm "
              f"{warm:.3f} s; import of the built .so (as if shipped prebuilt) {pre:.3f} s")
    print("OBSERVER_PROBE_REPORT " + json.dumps({"median_s": med, "min_s": low}))


if __name__ == "__main__":
    main()
