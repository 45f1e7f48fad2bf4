#!/usr/bin/env python3
"""Step-time overhead of recording, side by side: the same models run plain, under PyTorch's
MemTracker, under PyTorch's profiler with profile_memory=True, under a do-nothing
TorchDispatchMode (the floor any dispatch-mode tool pays) and under `memtrack record` (a
release build) with each of its observers (`--observer python`, and
`--observer compiled`, `auto`'s choice on the CPU, built by its first cell); then the start-up cost per process
(`python -c "import torch"` plain and under `memtrack record`). `lstmcell` is a loop of
small ops (an LSTMCell unrolled 16 steps, about 1,000 ops a step); `conv` a small conv net. `conv-compiled` is the conv model under
torch.compile: its slowdown is reported separately, against the compiled model run plain
(MemTracker and a dispatch mode would switch compilation off, so they are not run on it).
A cell that cannot run (MemTracker on the LSTMCell loop) prints "-" and why.

    cargo build --release
    python bench/record_overhead.py                      # 3 interleaved rounds, min per cell
    python bench/record_overhead.py --rounds 5 --steps 40 --models mlp8,conv-compiled

Each cell runs in a fresh process: build the model, 3 warm-up steps, then timed blocks of
steps; a cell's figure is the fastest block's time per step (CPU time of the process, which
other load on the machine disturbs least; wall time is printed too). Rounds are interleaved
and the minimum over rounds kept, so a noisy neighbour inflates nothing systematically.
"""

import argparse
import json
import os
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


def under_record(args, mode, cmd, name):
    """cmd as `memtrack record` runs it with the observer `mode` names (cmd itself for any
    other mode)."""
    if mode not in RECORD_MODES:
        return cmd
    out = os.path.join(tempfile.mkdtemp(prefix="memtrack-bench-"), name)
    return [args.memtrack, "record", "--backend", "cpu", "--observer", RECORD_MODES[mode],
            "-o", out, "--"] + cmd


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
    med_wall = sorted(walls)[len(walls) // 2]
    med_cpu = sorted(cpus)[len(cpus) // 2]
    print(
        "MEMTRACK_BENCH "
        + json.dumps({"cpu_s": best_cpu, "wall_s": best_wall, "ops_per_step": Count.n or None,
                      "median_wall_s": med_wall, "median_cpu_s": med_cpu,
                      "max_wall_s": max(walls), "max_step": walls.index(max(walls))})
    )


def run_cell(args, model_name, mode):
    cmd = [args.python, os.path.abspath(__file__), "--worker", model_name,
           "plain" if mode in RECORD_MODES else mode,
           "--steps", str(args.steps), "--threads", str(args.threads)]
    cmd = under_record(args, mode, cmd, "bench.pkl")
    env = dict(os.environ)
    env.pop("MEMTRACK_SOCKET", None)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("MEMTRACK_BENCH "):
            return json.loads(line[len("MEMTRACK_BENCH "):])
    if mode == "memtracker":  # MemTracker cannot run every model: say why, go on
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{model_name} under MemTracker failed: {last[:160]}", file=sys.stderr)
        return None
    raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")


IMPORT_TORCH = (
    "import time; t = time.perf_counter(); import torch; "
    "print('MEMTRACK_IMPORT', time.perf_counter() - t)"
)


def run_startup(args, mode):
    """One start of `python -c "import torch"`: (seconds the import took inside the process,
    including the agent's activation; wall seconds of the whole command, collector included)."""
    cmd = under_record(args, mode, [args.python, "-c", IMPORT_TORCH], "start.pkl")
    env = dict(os.environ)
    env.pop("MEMTRACK_SOCKET", None)
    w = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - w
    for line in p.stdout.splitlines():
        if line.startswith("MEMTRACK_IMPORT "):
            return float(line.split()[1]), wall
    raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")


# The floors: slowdown of memtrack record per model (CPU time per step), no step
# above STALL_FLOOR times the median step (wall); start-up seconds added.
FLOORS = {"lstmcell": 2.0, "conv": 1.25}
STALL_FLOOR = 5.0
STARTUP_FLOOR_S = 0.4


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
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.steps, args.threads)
        return
    if not os.path.exists(args.memtrack):
        raise SystemExit(f"{args.memtrack} not found: run `cargo build --release` first")
    models = args.models.split(",")
    best = {}
    ops = {}
    for r in range(args.rounds):
        for m in models:
            for mode in modes_for(m):
                res = run_cell(args, m, mode)
                if res is None:
                    continue
                k = (m, mode)
                if res.get("ops_per_step"):
                    ops[m] = res["ops_per_step"]
                old = best.get(k)
                best[k] = {
                    "cpu_s": min(res["cpu_s"], old["cpu_s"]) if old else res["cpu_s"],
                    "wall_s": min(res["wall_s"], old["wall_s"]) if old else res["wall_s"],
                    # the worst step over max-step/median of every round
                    "stall": max(res["max_wall_s"] / res["median_wall_s"],
                                 old["stall"] if old else 0.0),
                    "median_wall_s": min(res["median_wall_s"], old["median_wall_s"])
                    if old else res["median_wall_s"],
                    "median_cpu_s": min(res["median_cpu_s"], old["median_cpu_s"])
                    if old else res["median_cpu_s"],
                }
                print(f"round {r + 1}: {m:5} {mode:13} {res['cpu_s'] * 1e3:8.2f} ms cpu "
                      f"{res['wall_s'] * 1e3:8.2f} ms wall; median step "
                      f"{res['median_cpu_s'] * 1e3:.2f} ms cpu {res['median_wall_s'] * 1e3:.2f} ms "
                      f"wall, slowest {res['max_wall_s'] * 1e3:.1f} ms wall (step "
                      f"{res['max_step']}, {res['max_wall_s'] / res['median_wall_s']:.1f}x the "
                      "median)", file=sys.stderr)
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
        if m in FLOORS:
            for mode, observer in RECORD_MODES.items():
                floors.append((f"{m} slowdown under record, {observer} observer",
                               best[(m, mode)]["cpu_s"] / base, FLOORS[m], "x"))
                floors.append((f"{m} slowest step / median, {observer} observer",
                               best[(m, mode)]["stall"], STALL_FLOOR, "x"))
        mt = best[(m, "memtracker")]["cpu_s"] / base if (m, "memtracker") in best else None
        ratio = f"{us / mt:20.2f}" if mt else f"{'-':>20}"
        pr = best[(m, "profiler")]["cpu_s"] / base
        print(f"{m:13} {ops.get(m, 0):8} " + " ".join(f"{c:>22}" for c in cells)
              + f" {ratio} {us / pr:18.2f}")
        report[m] = {mode: best[(m, mode)] for mode in modes_for(m) if (m, mode) in best}
        report[m]["slowdown_memtracker"] = mt
        report[m]["slowdown_memtrack"] = us
        report[m]["slowdown_memtrack_compiled"] = best[(m, "memtrack-compiled")]["cpu_s"] / base
        report[m]["slowdown_profiler"] = best[(m, "profiler")]["cpu_s"] / base
    print("\nslowdown = step time / plain step time")
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
    print(f"\nstart-up, fastest of {args.starts}: `import torch` inside the process "
          f"{imp['plain']:.3f} s plain, {imp['memtrack']:.3f} s under record "
          f"(+{imp['memtrack'] - imp['plain']:.3f} s); the whole command "
          f"{wall['plain']:.3f} s plain, {wall['memtrack']:.3f} s under record "
          f"(+{wall['memtrack'] - wall['plain']:.3f} s); with the compiled observer (built "
          f"before) +{imp['memtrack-compiled'] - imp['plain']:.3f} s, "
          f"+{wall['memtrack-compiled'] - wall['plain']:.3f} s")
    report["startup"] = {"import_s": imp, "command_s": wall}
    for mode, observer in RECORD_MODES.items():
        floors.append((f"start-up added per process, {observer} observer",
                       imp[mode] - imp["plain"], STARTUP_FLOOR_S, "s"))

    print("\nfloors:")
    for what, got, limit, unit in floors:
        verdict = "ok" if got <= limit else "OVER"
        print(f"  {what:45} {got:7.3f}{unit}  (at most {limit}{unit})  {verdict}")
    print("MEMTRACK_BENCH_REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
