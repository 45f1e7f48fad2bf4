#!/usr/bin/env python3
"""The hybrid observer (hybrid.cpp): a C++ RecordFunction callback as the per-op trampoline,
the per-op body still in Python. Two questions, side by side in one run:

  --check   does its filter see the ops a TorchDispatchMode sees, in the same order? One
            training step of each model under a recording dispatch mode, one under the hybrid
            observer; the two lists of op names are compared.
  (default) what it costs on the LSTMCell loop and the conv model of bench/record_overhead.py:
            plain; a do-nothing dispatch mode; a dispatch mode running a per-op body shaped as
            the agent's (graph task id, output storage looked up in a dict, a weakref for a
            new one, one int written to a preallocated array); the hybrid calling no Python;
            the hybrid calling the same body.

    pip install ninja        # into the venv: cpp_extension.load needs it
    python bench/observer_probe/hybrid.py --check
    python bench/observer_probe/hybrid.py --rounds 3 --steps 70

Each cell is a fresh process (3 warm-up steps, 7 timed blocks, CPU time per step); a cell's
figure is the median over rounds of each process's median block. Rounds are interleaved.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
BUILD = os.environ.get(
    "MEMTRACK_OBSERVER_BUILD", os.path.expanduser("~/.cache/memtrack/observer_hybrid_build")
)
MODES = ["plain", "dispatch-nop", "dispatch-body", "hybrid-nocall", "hybrid"]


def load():
    from torch.utils.cpp_extension import load as jit_load

    os.makedirs(BUILD, exist_ok=True)
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return jit_load(
        name="memtrack_observer_hybrid",
        sources=[os.path.join(HERE, "hybrid.cpp")],
        build_directory=BUILD,
        extra_cflags=["-O2"],
    )


def make_body():
    """A per-op body shaped as the agent's (ops.py _dispatch after the op): (code, out)."""
    import torch
    from array import array

    Tensor = torch.Tensor
    Storage = torch.UntypedStorage
    gtid = torch._C._current_graph_task_id
    known = {}
    known_get = known.get
    spool = array("q", bytes(8 * (1 << 22)))
    at = [0]
    wref = weakref.ref

    def on_del(k):
        known.pop(k, None)

    def body(code, out, storage=False):
        bw = gtid() != -1
        if storage or type(out) is Tensor:
            if storage:
                st = out if type(out) is Storage else None
            else:
                try:
                    st = out.untyped_storage()
                except Exception:
                    st = None
            if st is not None:
                k = id(st)
                if known_get(k) is None:
                    known[k] = [0, st.nbytes(), wref(st, lambda w, k=k: on_del(k))]
        i = at[0]
        spool[i & ((1 << 22) - 1)] = code << 1 | bw
        at[0] = i + 1

    return body


def start(mode, names=None):
    if mode.startswith("dispatch"):
        from torch.utils._python_dispatch import TorchDispatchMode

        body = make_body() if mode == "dispatch-body" else None
        codes = {}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if names is not None:
                    names.append(func.__name__)
                if body is not None:
                    c = codes.get(func)
                    if c is None:
                        c = codes[func] = len(codes)
                    body(c, out)
                return out

        m = Mode()
        m.__enter__()
        return m
    if mode.startswith("hybrid"):
        ext = load()
        if names is not None:
            table = []

            def on_op(i, out):
                if not table or len(table) <= i:
                    table[:] = ext.op_names()
                names.append(table[i])

            ext.install(on_op, True)
        else:
            body = make_body()
            ext.install(lambda code, st: body(code, st, True), mode == "hybrid")
        return ext
    return None


def uninstall(mode, handle):
    if mode.startswith("dispatch"):
        handle.__exit__(None, None, None)
    elif mode.startswith("hybrid"):
        handle.uninstall()


def check(model_name):
    import torch
    from record_overhead import build

    torch.set_num_threads(1)
    got = {}
    for mode in ("dispatch-nop", "hybrid"):
        model, opt, loss_fn, x, y = build(model_name)
        names = []
        h = start(mode, names)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        uninstall(mode, h)
        got[mode] = [n for n in names if n != "detach.default"]
    a, b = got["dispatch-nop"], got["hybrid"]
    first = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), None)
    same = a == b
    print(f"{model_name}: dispatch mode {len(a)} ops, hybrid {len(b)} ops: "
          + ("the same, in order" if same else f"differ (first at {first if first is not None else min(len(a), len(b))})"))
    if not same:
        i = first if first is not None else min(len(a), len(b))
        print("  dispatch:", a[max(0, i - 3):i + 6])
        print("  hybrid:  ", b[max(0, i - 3):i + 6])
    return same


def worker(mode, model_name, steps):
    import torch
    from record_overhead import build

    torch.set_num_threads(1)
    start(mode)
    model, opt, loss_fn, x, y = build(model_name)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    per = max(1, steps // 7)
    cpu = []
    for _ in range(7):
        c = time.process_time()
        for _ in range(per):
            step()
        cpu.append((time.process_time() - c) / per)
    print(json.dumps({"median": statistics.median(cpu), "min": min(cpu)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--models", default="lstmcell,conv")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=70)
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "MODEL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1], a.steps)
    models = a.models.split(",")
    if a.check:
        load()
        ok = all([check(m) for m in models])
        sys.exit(0 if ok else 1)
    load()  # build once, outside the timings
    cells = {(m, mode): [] for m in models for mode in MODES}
    for r in range(a.rounds):
        for m in models:
            for mode in MODES:
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", mode, m, "--steps", str(a.steps)],
                    capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"{mode} {m} failed:\n{out.stderr[-3000:]}")
                cells[(m, mode)].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    for m in models:
        plain = statistics.median(c["median"] for c in cells[(m, "plain")])
        print(f"\n{m}: plain {plain * 1e3:.2f} ms/step")
        for mode in MODES:
            med = statistics.median(c["median"] for c in cells[(m, mode)])
            fast = min(c["min"] for c in cells[(m, mode)])
            print(f"  {mode:14s} {med * 1e3:7.2f} ms  {med / plain:5.2f}x   (fastest block {fast / plain:.2f}x)")


if __name__ == "__main__":
    main()
