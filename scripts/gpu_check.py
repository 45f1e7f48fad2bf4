#!/usr/bin/env python3
"""The CUDA checks memtrack cannot run without a GPU (scripts/gpu-check.sh runs this).

1. Per-op allocated: the same training steps under PyTorch's MemoryTracker and under
   `memtrack record --backend cuda` give the same allocated bytes after every op.
2. Per-op overhead: (step time with the tool - plain step time) / ops per step, for both;
   memtrack's must be at most half of MemoryTracker's.
3. `--snapshot`: allocator snapshots at exit and at a CUDA out-of-memory error, named in the
   stats, and the OOM recorded.

Modes (--mode) are run as separate processes by main(); each prints one JSON line.
"""

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def model_and_data(torch):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from mlp_batchnorm import MLP

    torch.manual_seed(0)
    model = MLP(width=1024, blocks=8).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    return model, opt, torch.nn.CrossEntropyLoss(), x, y


def run_steps(torch, model, opt, loss_fn, x, y, n):
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()


def mode_time(args):
    """Step time: plain (also under memtrack record, which injects itself) or MemoryTracker."""
    import torch

    model, opt, loss_fn, x, y = model_and_data(torch)
    run_steps(torch, model, opt, loss_fn, x, y, 3)
    mt = None
    if args.tool == "memorytracker":
        from torch.distributed._tools.memory_tracker import MemoryTracker

        mt = MemoryTracker()
        mt.start_monitor(model)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        run_steps(torch, model, opt, loss_fn, x, y, args.steps)
        best = min(best, (time.perf_counter() - t) / args.steps)
    if mt is not None:
        mt.stop()
    print(json.dumps({"step_s": best}))


def mode_trace(args):
    """The op-by-op trace of K steps: MemoryTracker's own file, or (under memtrack) nothing:
    memtrack writes its file itself."""
    import torch

    model, opt, loss_fn, x, y = model_and_data(torch)
    run_steps(torch, model, opt, loss_fn, x, y, 2)  # warm: Adam states exist
    if args.tool == "memorytracker":
        from torch.distributed._tools.memory_tracker import MemoryTracker

        mt = MemoryTracker()
        mt.start_monitor(model)
        run_steps(torch, model, opt, loss_fn, x, y, args.steps)
        mt.stop()
        mt.save_stats(args.out)
    else:
        torch.cuda.empty_cache()  # as start_monitor does
        run_steps(torch, model, opt, loss_fn, x, y, args.steps)
    print(json.dumps({"ok": True}))


def mode_oom(args):
    import torch

    model, opt, loss_fn, x, y = model_and_data(torch)
    run_steps(torch, model, opt, loss_fn, x, y, 1)
    free, total = torch.cuda.mem_get_info()
    torch.empty(total * 2, dtype=torch.uint8, device="cuda")  # raises OutOfMemoryError


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def last_json(p):
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no result:\n{p.stdout}\n{p.stderr}")


def op_kind(name):
    """`MLP.blocks.0.fc.forward.addmm.default_12` -> `addmm.default`."""
    for phase in (".forward.", ".backward.", ".step."):
        if phase in name:
            name = name.rsplit(phase, 1)[1]
            break
    else:
        name = name.lstrip(".")
    return name.rsplit("_", 1)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode")
    ap.add_argument("--tool", default="plain")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out")
    ap.add_argument("--memtrack", default=os.path.join(ROOT, "target", "release", "memtrack"))
    args = ap.parse_args()
    if args.mode:
        {"time": mode_time, "trace": mode_trace, "oom": mode_oom}[args.mode](args)
        return

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: these checks need a GPU")
    py, me, mt = sys.executable, os.path.abspath(__file__), args.memtrack
    tmp = tempfile.mkdtemp(prefix="memtrack-gpu-check-")
    failures = []
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}

    # 1. per-op allocated equal to MemoryTracker's
    ref = os.path.join(tmp, "memory_tracker.pkl")
    ours = os.path.join(tmp, "memtrack.pkl")
    p = sh([py, me, "--mode", "trace", "--tool", "memorytracker", "--steps", "2", "--out", ref])
    last_json(p)
    p = sh([mt, "record", "--backend", "cuda", "-o", ours, "--", py, me, "--mode", "trace", "--steps", "2"])
    last_json(p)
    with open(ref, "rb") as f:
        r = pickle.load(f)
    o = json.loads(sh([mt, "export", ours]).stdout)
    rops = [(op_kind(n), mib) for n, mib in r["memories_allocated"].values()]
    ops = o["ops"]
    # memtrack records from `import torch`; MemoryTracker from start_monitor: align on the
    # fw_start of the first traced step (the third iteration: two warm-up steps precede it)
    starts = [m["op_index"] for m in o["memtrack"]["marker_events"] if m["name"] == "fw_start"]
    first = starts[2]
    mine = [(op_kind(x["name"]), x["allocated_bytes"] / 2**20) for x in ops[first:first + len(rops)]]
    report["ops_compared"] = len(rops)
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(rops, mine)) if a[0] != b[0] or abs(a[1] - b[1]) > 0]
    if len(mine) != len(rops) or diff:
        failures.append(f"per-op allocated differs at {len(diff)} ops (first: {diff[:3]}); "
                        f"{len(rops)} vs {len(mine)} ops")
    report["allocated_equal"] = not diff and len(mine) == len(rops)

    # 2. per-op overhead
    steps = str(args.steps)
    plain = last_json(sh([py, me, "--mode", "time", "--steps", steps]))["step_s"]
    mtk = last_json(sh([py, me, "--mode", "time", "--tool", "memorytracker", "--steps", steps]))["step_s"]
    ours_t = last_json(sh([mt, "record", "--backend", "cuda", "-o", os.path.join(tmp, "t.pkl"), "--",
                           py, me, "--mode", "time", "--steps", steps]))["step_s"]
    per_step_ops = len(rops) / 2
    report.update(
        plain_step_ms=plain * 1e3, memorytracker_step_ms=mtk * 1e3, memtrack_step_ms=ours_t * 1e3,
        ops_per_step=per_step_ops,
        memorytracker_us_per_op=(mtk - plain) / per_step_ops * 1e6,
        memtrack_us_per_op=(ours_t - plain) / per_step_ops * 1e6,
    )
    if (ours_t - plain) > 0.5 * (mtk - plain):
        failures.append("per-op overhead above half of MemoryTracker's")

    # 3. snapshots at exit and at OOM
    snap_out = os.path.join(tmp, "oom.pkl")
    p = sh([mt, "record", "--backend", "cuda", "--snapshot", "-o", snap_out, "--", py, me, "--mode", "oom"])
    report["oom_exit_code"] = p.returncode
    o = json.loads(sh([mt, "export", snap_out]).stdout)["memtrack"]
    paths = o["snapshot_paths"]
    report["snapshots"] = paths
    if p.returncode != 1 or not o["exit"]["oom"]:
        failures.append(f"OOM: exit {p.returncode}, exit info {o['exit']}")
    if not any(x.endswith(".oom.pickle") and os.path.exists(x) for x in paths):
        failures.append(f"no OOM snapshot in {paths}")
    if not any(x.endswith(".exit.pickle") and os.path.exists(x) for x in paths):
        failures.append(f"no exit snapshot in {paths}")
    for x in paths:
        with open(x, "rb") as f:
            snap = pickle.load(f)  # what torch.cuda.memory._dump_snapshot wrote
        report.setdefault("snapshot_segments", {})[os.path.basename(x)] = len(snap["segments"])

    print(json.dumps(report, indent=2))
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
