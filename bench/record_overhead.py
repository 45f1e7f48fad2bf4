#!/usr/bin/env python3
"""Step-time overhead of recording, side by side: the same models run plain, under PyTorch's
MemTracker, under PyTorch's profiler with profile_memory=True, under a do-nothing
TorchDispatchMode (the floor any dispatch-mode tool pays) and under `memtrack record` (a
release build) with each of its observers (`--observer python`, and
`--observer compiled`, `auto`'s choice on the CPU, built before the first cell); then the start-up cost per process
(`python -c "import torch"` plain and under `memtrack record`). `lstmcell` is a loop of
small ops (an LSTMCell unrolled 16 steps, about 1,000 ops a step); `conv` a small conv net. `conv-compiled` is the conv model under
torch.compile: its slowdown is reported separately, against the compiled model run plain
(MemTracker and a dispatch mode would switch compilation off, so they are not run on it).
A cell that cannot run (MemTracker on the LSTMCell loop) prints "-" and why.

    cargo build --release
    python bench/record_overhead.py                      # 3 interleaved rounds, min per cell
    python bench/record_overhead.py --rounds 5 --steps 40 --models mlp8,conv-compiled
    python bench/record_overhead.py --instructions       # instructions a step (valgrind)

Each cell runs in a fresh process: build the model, 3 warm-up steps, then timed blocks of
steps; a cell's figure is the fastest block's time per step (CPU time of the process, which
other load on the machine disturbs least; wall time is printed too). Rounds are interleaved:
each mode's slowdown is taken against plain in the same round, and the floors are judged on
the median round (the minimum printed beside it); the table keeps each cell's fastest round.

What the figures depend on is printed with them: the CPU, the load average, the Python build,
torch's CPU kernels, and which path the agent's work took in each recorded cell, a step
(counted in the program, after the timing: the same on any machine): ops accounted in C by
the compiled observer or handed to the agent's Python, module calls done in C or through the
tracker's Python, records written in place or through the agent's Python writers, and the
calls of the agent's Python functions one more step makes (docs/record.md, Overhead). A
compiled observer that could not be built or loaded shows there as the python observer.
Beside them, the process's user and system time, page faults and context switches a step: the
machine's kernel and hypervisor, which the paths do not count. `--instructions` counts the
instructions a step under valgrind's callgrind instead (plain and each observer, by where they
ran): a figure that is the same on any machine running the same binaries.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ["plain", "dispatch-nop", "profiler", "memtracker", "memtrack", "memtrack-compiled"]
COMPILED_MODES = ["plain", "profiler", "memtrack", "memtrack-compiled"]
# memtrack record's two observers (record --observer): the mode names here
RECORD_MODES = {"memtrack": "python", "memtrack-compiled": "compiled"}


def under_record(args, mode, cmd, folder):
    """cmd as `memtrack record` runs it with the observer `mode` names, its file in `folder`
    (cmd itself for any other mode)."""
    if mode not in RECORD_MODES:
        return cmd
    return [args.memtrack, "record", "--backend", "cpu", "--observer", RECORD_MODES[mode],
            "-o", os.path.join(folder, "bench.pkl"), "--"] + cmd


def run_recorded(args, mode, cmd, extra_env=None):
    """Run cmd (under record where `mode` says), its file in a temporary folder removed after:
    the finished process, and wall seconds."""
    with tempfile.TemporaryDirectory(prefix="memtrack-bench-") as folder:
        cmd = under_record(args, mode, cmd, folder)
        env = dict(os.environ, **(extra_env or {}))
        env.pop("MEMTRACK_SOCKET", None)
        w = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        return p, time.perf_counter() - w


def modes_for(model_name):
    return COMPILED_MODES if model_name.endswith("-compiled") else MODES


def build(model_name):
    import torch
    import torch.nn as nn

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    torch.manual_seed(0)
    if model_name == "lstmcell":

        class Unrolled(nn.Module):
            def __init__(self, steps):
                super().__init__()
                self.steps = steps
                self.cell = nn.LSTMCell(32, 32)
                self.head = nn.Linear(32, 10)

            def forward(self, x):
                h = x.new_zeros(x.shape[1], 32)
                c = h
                for t in range(self.steps):
                    h, c = self.cell(x[t], (h, c))
                return self.head(h)

        model = Unrolled(16)
        x, y = torch.randn(16, 8, 32), torch.randint(0, 10, (8,))
    elif model_name == "mlp8":
        from mlp_batchnorm import MLP

        model = MLP(width=256, blocks=8)
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    elif model_name in ("conv", "conv-compiled"):
        c = [3, 16, 32, 32]
        layers = []
        for i in range(3):
            layers += [nn.Conv2d(c[i], c[i + 1], 3, padding=1), nn.BatchNorm2d(c[i + 1]), nn.ReLU()]
            if i < 2:
                layers.append(nn.MaxPool2d(2))
        model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
        x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    else:
        raise SystemExit(f"unknown model {model_name}")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if model_name.endswith("-compiled"):
        model = torch.compile(model)
    return model, opt, nn.CrossEntropyLoss(), x, y


def worker(model_name, mode, steps, threads):
    import torch

    torch.set_num_threads(threads)
    ctx = None
    if mode == "memtracker":
        from torch.distributed._tools.mem_tracker import MemTracker

        ctx = MemTracker()
        ctx.__enter__()
    elif mode == "dispatch-nop":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Nop(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        ctx = Nop()
        ctx.__enter__()
    elif mode == "profiler":
        from torch.profiler import ProfilerActivity, profile

        ctx = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        ctx.__enter__()
    model, opt, loss_fn, x, y = build(model_name)

    def step():
        if mode == "memtracker":
            ctx.reset_mod_stats()  # MemTracker raises on a second iteration otherwise
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    for _ in range(3):
        step()
    if mode == "plain" and not model_name.endswith("-compiled"):
        with Count():
            step()
    before = agent_paths()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    blocks, per = 5, max(1, steps // 5)
    best_cpu = best_wall = float("inf")
    walls, cpus = [], []  # every step's own time: a stall shows as one slow step
    for _ in range(blocks):
        c, w = time.process_time(), time.perf_counter()
        for _ in range(per):
            sc, sw = time.process_time(), time.perf_counter()
            step()
            walls.append(time.perf_counter() - sw)
            cpus.append(time.process_time() - sc)
        best_cpu = min(best_cpu, (time.process_time() - c) / per)
        best_wall = min(best_wall, (time.perf_counter() - w) / per)
    # the timed steps' kernel time, page faults and context switches (all threads): what a
    # machine's kernel or hypervisor adds, beside the user time the paths explain
    after_usage = resource.getrusage(resource.RUSAGE_SELF)
    kernel = {k: (getattr(after_usage, f) - getattr(usage, f)) / (blocks * per)
              for k, f in [("sys_s", "ru_stime"), ("user_s", "ru_utime"), ("faults", "ru_minflt"),
                           ("major_faults", "ru_majflt"), ("switches", "ru_nvcsw"),
                           ("preempted", "ru_nivcsw")]}
    paths = None
    if before is not None:  # recorded: what the agent did a step, read after the timing
        after = agent_paths()
        paths = {k: (v - before[k]) / len(walls) if type(v) is int else v
                 for k, v in after.items()}
        paths["agent_python_calls"], paths["agent_python_top"] = agent_python_calls(step)
    med_wall = sorted(walls)[len(walls) // 2]
    med_cpu = sorted(cpus)[len(cpus) // 2]
    print(
        "MEMTRACK_BENCH "
        + json.dumps({"cpu_s": best_cpu, "wall_s": best_wall, "ops_per_step": Count.n or None,
                      "median_wall_s": med_wall, "median_cpu_s": med_cpu,
                      "max_wall_s": max(walls), "max_step": walls.index(max(walls)),
                      "paths": paths, "kernel": kernel, "torch": torch.__version__,
                      "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "torch_threads": torch.get_num_threads()})
    )


def agent_paths():
    """Which path memtrack's agent took so far in this process (its native.paths(): the
    compiled observer's counts, kept in C), or None where the process is not recorded."""
    agent = sys.modules.get("_memtrack_agent")
    native = getattr(agent, "native", None)
    return native.paths() if native is not None else None


def agent_python_calls(step):
    """How many calls of the agent's Python functions one more step makes (sys.setprofile sees
    one called from C too), and the five commonest: counted after the timed steps, which it
    would slow."""
    calls = {}
    folder = os.sep + "_memtrack_agent" + os.sep

    def profile(frame, event, arg):
        if event == "call" and folder in frame.f_code.co_filename:
            key = os.path.basename(frame.f_code.co_filename)[:-3] + "." + frame.f_code.co_name
            calls[key] = calls.get(key, 0) + 1

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
    return sum(calls.values()), dict(top)


def run_cell(args, model_name, mode):
    cmd = [args.python, os.path.abspath(__file__), "--worker", model_name,
           "plain" if mode in RECORD_MODES else mode,
           "--steps", str(args.steps), "--threads", str(args.threads)]
    p, _ = run_recorded(args, mode, cmd)
    for line in p.stdout.splitlines():
        if line.startswith("MEMTRACK_BENCH "):
            res = json.loads(line[len("MEMTRACK_BENCH "):])
            # what record said (a fallback to the python observer, a build)
            res["said"] = [x for x in p.stderr.splitlines() if x.startswith("memtrack:")]
            return res
    if mode == "memtracker":  # MemTracker cannot run every model: say why, go on
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{model_name} under MemTracker failed: {last[:160]}", file=sys.stderr)
        return None
    raise SystemExit(f"{' '.join(p.args)} failed:\n{p.stdout}\n{p.stderr}")


IMPORT_TORCH = (
    "import time; t = time.perf_counter(); import torch; "
    "print('MEMTRACK_IMPORT', time.perf_counter() - t)"
)


def run_startup(args, mode):
    """One start of `python -c "import torch"`: (seconds the import took inside the process,
    including the agent's activation; wall seconds of the whole command, collector included)."""
    p, wall = run_recorded(args, mode, [args.python, "-c", IMPORT_TORCH])
    for line in p.stdout.splitlines():
        if line.startswith("MEMTRACK_IMPORT "):
            return float(line.split()[1]), wall
    raise SystemExit(f"{' '.join(p.args)} failed:\n{p.stdout}\n{p.stderr}")


# The floors: slowdown of memtrack record per model (CPU time per step, against plain in the
# same round: the median of the rounds), the compiled observer below a do-nothing dispatch
# mode; no step above STALL_FLOOR times the median step (wall); start-up seconds added.
FLOORS = {"lstmcell": 2.0, "conv": 1.25}
STALL_FLOOR = 5.0
STARTUP_FLOOR_S = 0.4


def machine(args):
    """What the figures depend on, in words: the CPU, its load, the Python build, torch."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(x.split(":", 1)[1].strip() for x in f if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    probe = (
        "import sys, sysconfig, torch; c = sysconfig.get_config_var('CONFIG_ARGS') or ''; "
        "print(sys.version.split()[0], 'pgo' if '--enable-optimizations' in c else 'no-pgo', "
        "torch.__version__, torch.backends.cpu.get_cpu_capability())"
    )
    out = subprocess.run([args.python, "-c", probe], capture_output=True, text=True).stdout
    py, pgo, torch_version, capability = (out.split() + ["?"] * 4)[:4]
    pgo = "built with PGO" if pgo == "pgo" else "built without --enable-optimizations (no PGO)"
    return (f"{cpu}, {os.cpu_count()} cores; Python {py} {pgo}; torch {torch_version} "
            f"(CPU kernels {capability}), {args.threads} torch thread(s)")


def build_observer(args):
    """Build the compiled observer (if its cache has none for this torch) before any cell is
    timed; say so, and say where it cannot be used."""
    p, wall = run_recorded(args, "memtrack-compiled", [args.python, "-c", "import torch"])
    said = [x for x in p.stderr.splitlines() if x.startswith("memtrack:")]
    if any("building the compiled observer" in x for x in said):
        print(f"the compiled observer was built first ({wall:.0f} s)", file=sys.stderr)
    for x in said:
        if "cannot be used" in x:
            print(f"WARNING, the compiled observer's cells are the python observer's: {x}",
                  file=sys.stderr)


# callgrind_annotate's lines: "1,234 (12.3%)  file:function [object]"
ANNOTATED = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?)(?: \[([^\]]*)\])?\s*$")
# where an instruction ran, by the object file it is in
PLACES = [("the compiled observer", "memtrack_observer"), ("the Python interpreter", "libpython"),
          ("torch", "libtorch"), ("torch", "libc10"), ("malloc, TLS, C++ runtime", "libc.so"),
          ("malloc, TLS, C++ runtime", "libstdc++"), ("malloc, TLS, C++ runtime", "ld-linux")]


def place_of(obj):
    base = os.path.basename(obj or "")
    return next((name for name, prefix in PLACES if base.startswith(prefix)), "other")


def instructions_of(args, model_name, mode, steps, folder):
    """The instructions the worker's process ran with `steps` timed steps, in all and by place
    (valgrind's callgrind: a count, the same on any machine running the same binaries)."""
    out = os.path.join(folder, f"{model_name}-{mode}-{steps}.callgrind")
    worker = [args.python, os.path.abspath(__file__), "--worker", model_name,
              "plain" if mode in RECORD_MODES else mode, "--steps", str(steps),
              "--threads", str(args.threads)]
    # numpy's OpenBLAS threads (numpy is loaded with torch, unused here) wait for work by
    # spinning, more or less of it as valgrind's pace goes: one thread, so that none spins
    p, _ = run_recorded(args, mode, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out]
                        + worker, {"OPENBLAS_NUM_THREADS": "1"})
    if p.returncode != 0 or not os.path.exists(out):
        raise SystemExit(f"{' '.join(p.args)} failed:\n{p.stderr[-2000:]}")
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", out],
                          capture_output=True, text=True, check=True).stdout
    total, places = 0, {}
    for line in text.splitlines():
        m = ANNOTATED.match(line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in m.group(2):
            total = n
            continue
        where = place_of(m.group(3))
        places[where] = places.get(where, 0) + n
    return total, places


def instructions(args, models):
    """Instructions a step, plain and under record with each observer: each cell run twice
    (5 and 25 timed steps) so that start-up cancels out; as many at a time as there are
    cores."""
    import concurrent.futures

    for tool in ("valgrind", "callgrind_annotate"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            raise SystemExit(f"--instructions needs {tool} (Debian's package valgrind)")
    few, many = 5, 25
    modes = ["plain", "memtrack-compiled", "memtrack"]
    with tempfile.TemporaryDirectory(prefix="memtrack-bench-") as folder:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            jobs = {(m, mode, n): pool.submit(instructions_of, args, m, mode, n, folder)
                    for m in models for mode in modes for n in (few, many)}
            counts = {k: j.result() for k, j in jobs.items()}
    print("\ninstructions a step (valgrind's callgrind, the program's process; the same to a "
          "few percent on any machine with this Python and torch, whatever its speed or load):")
    report = {}
    for m in models:
        per = {}
        for mode in modes:
            (t1, p1), (t2, p2) = counts[(m, mode, few)], counts[(m, mode, many)]
            per[mode] = ((t2 - t1) / (many - few),
                         {k: (p2.get(k, 0) - p1.get(k, 0)) / (many - few) for k in set(p1) | set(p2)})
        base, base_places = per["plain"]
        for mode in modes:
            total, places = per[mode]
            line = f"  {m:13} {mode:18} {total / 1e6:8.2f} M  {total / base:5.2f}x"
            if mode != "plain":
                added = sorted(((places.get(k, 0) - base_places.get(k, 0), k)
                                for k in set(places) | set(base_places)), reverse=True)
                line += "  added: " + ", ".join(f"{k} {d / 1e6:+.2f} M" for d, k in added
                                                if abs(d) >= 0.05e6)
            print(line)
        report[m] = {mode: {"instructions": t, "by_place": p} for mode, (t, p) in per.items()}
    print("MEMTRACK_BENCH_INSTRUCTIONS " + json.dumps(report))


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[(n - 1) // 2] + xs[n // 2]) / 2


def summarise(results):
    """A cell's figures over its rounds: the fastest block and median step (least over rounds),
    the worst stall, and the last round's paths (the same in every round)."""
    rs = [r for r in results if r]
    return {
        "cpu_s": min(r["cpu_s"] for r in rs),
        "wall_s": min(r["wall_s"] for r in rs),
        "stall": max(r["max_wall_s"] / r["median_wall_s"] for r in rs),
        "median_wall_s": min(r["median_wall_s"] for r in rs),
        "median_cpu_s": min(r["median_cpu_s"] for r in rs),
        "paths": rs[-1].get("paths"),
        "kernel": min((r["kernel"] for r in rs), key=lambda k: k["sys_s"] + k["user_s"]),
        "said": sorted({x for r in rs for x in r.get("said", [])}),
    }


def paired(runs, m, mode):
    """Each round's slowdown of `mode` against plain in the same round (CPU time): plain and
    recorded run back to back, so the machine's load moves both."""
    return [r["cpu_s"] / p["cpu_s"]
            for r, p in zip(runs.get((m, mode), []), runs[(m, "plain")]) if r and p]


def describe_paths(paths):
    """One line: which path the agent's work took a step."""
    if paths["observer"] != "compiled":
        return (f"every op through the dispatch mode's Python; "
                f"{paths['agent_python_calls']:,.0f} calls of the agent's Python")
    f = lambda k: f"{paths.get(k, 0):,.0f}"  # noqa: E731
    mods_c, mods_py = paths["module_pre_in_c"], paths["module_pre_to_python"]
    parts = [
        f"ops {f('ops_in_c')} accounted in C, {f('ops_to_python')} handed to Python",
        f"module calls {mods_c:,.0f} in C, {mods_py:,.0f} through the tracker's Python"
        if paths["module_path"] else "module path not bound: every module call in Python",
        f"backward marks {f('backward_in_c')} in C, {f('backward_to_python')} in Python",
        f"records {f('records_in_place')} in place, {f('records_to_python')} through Python "
        "writers" + (" (several threads: locked)" if paths["threaded"] else ""),
        f"storage deaths {f('deaths_in_c')} in C",
        f"{paths['agent_python_calls']:,.0f} calls of the agent's Python",
    ]
    if not paths["fast_path"]:
        parts.insert(0, "NO CPU FAST PATH")
    return "; ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--models", default="lstmcell,conv")
    ap.add_argument("--starts", type=int, default=5, help="start-up runs per side")
    ap.add_argument("--rounds", type=int, default=3)
    # a stall (a full collection) comes about once in several hundred steps: 30 would miss it
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--memtrack", default=os.path.join(ROOT, "target", "release", "memtrack"))
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions a step under valgrind instead of timing (minutes)")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.steps, args.threads)
        return
    if not os.path.exists(args.memtrack):
        raise SystemExit(f"{args.memtrack} not found: run `cargo build --release` first")
    models = args.models.split(",")
    load_before = os.getloadavg()[0]
    build_observer(args)
    if args.instructions:
        print(f"machine: {machine(args)}")
        instructions(args, models)
        return
    runs = {}  # (model, mode) -> each round's result (None: the cell could not run)
    for r in range(args.rounds):
        for m in models:
            for mode in modes_for(m):
                res = run_cell(args, m, mode)
                runs.setdefault((m, mode), []).append(res)
                if res is None:
                    continue
                print(f"round {r + 1}: {m:5} {mode:13} {res['cpu_s'] * 1e3:8.2f} ms cpu "
                      f"{res['wall_s'] * 1e3:8.2f} ms wall; median step "
                      f"{res['median_cpu_s'] * 1e3:.2f} ms cpu {res['median_wall_s'] * 1e3:.2f} ms "
                      f"wall, slowest {res['max_wall_s'] * 1e3:.1f} ms wall (step "
                      f"{res['max_step']}, {res['max_wall_s'] / res['median_wall_s']:.1f}x the "
                      "median)", file=sys.stderr)
    best = {k: summarise(v) for k, v in runs.items() if any(v)}
    ops = {m: next((r["ops_per_step"] for r in runs[(m, "plain")] if r and r["ops_per_step"]), 0)
           for m in models}
    print(f"\nmachine: {machine(args)}; load average {load_before:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end of the timed rounds")
    print(f"\nstep time, fastest of {args.rounds} rounds x 5 blocks "
          f"(torch threads {args.threads}; CPU time, wall in brackets)\n")
    print(f"{'model':13} {'ops/step':>8} " + " ".join(f"{m:>22}" for m in MODES) + f" {'memtrack/MemTracker':>20} {'memtrack/profiler':>18}")
    report = {}
    floors = []
    for m in models:
        base = best[(m, "plain")]["cpu_s"]
        cells = []
        for mode in MODES:
            b = best.get((m, mode))
            cells.append(
                f"{b['cpu_s'] * 1e3:6.2f} ms {b['cpu_s'] / base:5.2f}x [{b['wall_s'] * 1e3:5.1f}]"
                if b else "-"
            )
        us = best[(m, "memtrack")]["cpu_s"] / base
        mt = best[(m, "memtracker")]["cpu_s"] / base if (m, "memtracker") in best else None
        ratio = f"{us / mt:20.2f}" if mt else f"{'-':>20}"
        pr = best[(m, "profiler")]["cpu_s"] / base
        print(f"{m:13} {ops.get(m, 0):8} " + " ".join(f"{c:>22}" for c in cells)
              + f" {ratio} {us / pr:18.2f}")
        report[m] = {mode: best[(m, mode)] for mode in modes_for(m) if (m, mode) in best}
        report[m]["rounds"] = {mode: paired(runs, m, mode) for mode in modes_for(m)}
        report[m]["slowdown_memtracker"] = mt
        report[m]["slowdown_memtrack"] = us
        report[m]["slowdown_memtrack_compiled"] = best[(m, "memtrack-compiled")]["cpu_s"] / base
        report[m]["slowdown_profiler"] = pr
    print("\nslowdown = step time / plain step time")

    print(f"\nslowdown against plain in the same round (CPU time), minimum and median of "
          f"{args.rounds} rounds:")
    for m in models:
        cells = []
        for mode in modes_for(m)[1:]:
            xs = paired(runs, m, mode)
            if xs:
                cells.append(f"{mode} {min(xs):.2f}x / {median(xs):.2f}x")
        print(f"  {m:13} " + "   ".join(cells))
        nop = paired(runs, m, "dispatch-nop")
        for mode, observer in RECORD_MODES.items():
            xs = paired(runs, m, mode)
            seen = describe_paths(best[(m, mode)]["paths"])
            if m in FLOORS:
                floors.append((f"{m} slowdown under record, {observer} observer", median(xs),
                               FLOORS[m], "x", f"min {min(xs):.3f}x; {seen}"))
                floors.append((f"{m} slowest step / median, {observer} observer",
                               best[(m, mode)]["stall"], STALL_FLOOR, "x", ""))
            if m in FLOORS and nop and observer == "compiled":
                floors.append((f"{m} compiled observer / do-nothing dispatch mode",
                               median(xs) / median(nop), 1.0, "x", ""))

    print("\npaths a step under record (counted in the program, the same on any machine):")
    for m in models:
        for mode, observer in RECORD_MODES.items():
            b = best.get((m, mode))
            if b and b["paths"]:
                print(f"  {m:13} {observer:8} observer: {describe_paths(b['paths'])}")
                top = ", ".join(f"{k} {v:,.0f}" for k, v in b["paths"]["agent_python_top"].items())
                print(f"  {'':13} {'':8}           the agent's commonest Python calls: {top}")
            for said in b["said"] if b else []:
                print(f"  {m:13} {observer:8} observer: {said}")

    print("\nthe program's process a step (the fastest round): user and system CPU time, page "
          "faults (getrusage's: the spool's pages made present ahead count too), context "
          "switches (voluntary / preempted); system time and faults are the machine's kernel "
          "and hypervisor at work, which the paths do not count:")
    for m in models:
        for mode in modes_for(m):
            b = best.get((m, mode))
            if b:
                k = b["kernel"]
                print(f"  {m:13} {mode:18} user {k['user_s'] * 1e3:7.3f} ms  system "
                      f"{k['sys_s'] * 1e3:6.3f} ms  faults {k['faults']:7.1f} (major "
                      f"{k['major_faults']:.1f})  switches {k['switches']:.1f} / "
                      f"{k['preempted']:.1f}")

    print(f"\nmedian step (CPU / wall) and slowest step over the median (wall, worst round):")
    for m in models:
        for mode in modes_for(m):
            b = best.get((m, mode))
            if b:
                print(f"  {m:13} {mode:18} {b['median_cpu_s'] * 1e3:8.2f} ms cpu "
                      f"{b['median_wall_s'] * 1e3:8.2f} ms wall   slowest {b['stall']:5.1f}x")

    starts = {"plain": [], "memtrack": [], "memtrack-compiled": []}
    for _ in range(args.starts):
        for mode in starts:
            starts[mode].append(run_startup(args, mode))
    imp = {m: min(r[0] for r in v) for m, v in starts.items()}
    wall = {m: min(r[1] for r in v) for m, v in starts.items()}
    imp_med = {m: median([r[0] for r in v]) for m, v in starts.items()}
    print(f"\nstart-up, fastest of {args.starts}: `import torch` inside the process "
          f"{imp['plain']:.3f} s plain, {imp['memtrack']:.3f} s under record "
          f"(+{imp['memtrack'] - imp['plain']:.3f} s); the whole command "
          f"{wall['plain']:.3f} s plain, {wall['memtrack']:.3f} s under record "
          f"(+{wall['memtrack'] - wall['plain']:.3f} s); with the compiled observer (built "
          f"before) +{imp['memtrack-compiled'] - imp['plain']:.3f} s, "
          f"+{wall['memtrack-compiled'] - wall['plain']:.3f} s; medians: "
          f"+{imp_med['memtrack'] - imp_med['plain']:.3f} s python observer, "
          f"+{imp_med['memtrack-compiled'] - imp_med['plain']:.3f} s compiled")
    report["startup"] = {"import_s": imp, "command_s": wall, "import_median_s": imp_med}
    for mode, observer in RECORD_MODES.items():
        floors.append((f"start-up added per process, {observer} observer",
                       imp[mode] - imp["plain"], STARTUP_FLOOR_S, "s",
                       f"median {imp_med[mode] - imp_med['plain']:+.3f} s"))

    print("\nfloors (slowdowns: the median round; load average "
          f"{os.getloadavg()[0]:.1f} now):")
    for what, got, limit, unit, why in floors:
        verdict = "ok" if got <= limit else "OVER"
        print(f"  {what:50} {got:7.3f}{unit}  (at most {limit}{unit})  {verdict}"
              + (f"  [{why}]" if why else ""))
    report["machine"] = machine(args)
    print("MEMTRACK_BENCH_REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
