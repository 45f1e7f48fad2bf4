"""`memtrack estimate` against real H100 runs: peak allocated and peak reserved, side by side,
with the difference and the floor each is held to; beside them what PyTorch's MemTracker under
FakeTensorMode (on the "cpu" device, the one it runs on without CUDA) and accelerate's
`estimate-memory` answer for the same program
(bench/estimate_peers.py; accelerate needs `accelerate`, "-" where a tool has no answer).

    MEMTRACK=target/release/memtrack python3 bench/estimate_accuracy.py [--python PY]

Each program runs under `memtrack estimate` (default --gpu H100-80GB) with the Python given
(it needs torch; gpt2_train.py also transformers, resnet_train.py torchvision), and each
file's `memory_stats` is read back with `memtrack export`. The H100 figures: the recordings of
fixtures/record/ (their `memory_stats`), and for scripts/capture_gpu_snapshots.py under three
allocator settings the peaks of its H100 snapshots in fixtures/snapshots/h100/ (`memtrack
summary --format json`; the script's own `max_memory_reserved()` there was the same).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMTRACK = os.environ.get("MEMTRACK", os.path.join(ROOT, "target", "release", "memtrack"))
REC = os.path.join(ROOT, "fixtures", "record")
H100_SNAPSHOTS = os.path.join(ROOT, "fixtures", "snapshots", "h100")
CAPTURE = [os.path.join(ROOT, "scripts", "capture_gpu_snapshots.py"), "--steps", "12"]
# (name, program and arguments, PYTORCH_CUDA_ALLOC_CONF, H100 run, floor on peak allocated,
# floor on peak reserved, the program's name in bench/estimate_peers.py)
CASES = [
    ("gpt2_train.py", [os.path.join(REC, "gpt2_train.py")], None,
     os.path.join(REC, "h100_gpt2_train.pkl"), 0.03, 0.05, "gpt2"),
    ("resnet_train.py", [os.path.join(REC, "resnet_train.py")], None,
     os.path.join(REC, "h100_resnet18_train.pkl"), None, 0.10, "resnet"),
    ("capture \"\"", CAPTURE, "",
     os.path.join(H100_SNAPSHOTS, "gpt_default.pickle"), None, 0.05, "capture"),
    ("capture expandable", CAPTURE, "expandable_segments:True",
     os.path.join(H100_SNAPSHOTS, "gpt_expandable_segments.pickle"), None, 0.05, None),
    ("capture max_split", CAPTURE, "max_split_size_mb:128",
     os.path.join(H100_SNAPSHOTS, "gpt_max_split_size_mb.pickle"), None, 0.05, None),
]


def peer(python, tool, program):
    """What `tool` answers for `program` (bench/estimate_peers.py): bytes, or why not."""
    if program is None:
        return "-"
    r = subprocess.run(
        [python, os.path.join(ROOT, "bench", "estimate_peers.py"), tool, program],
        capture_output=True,
        text=True,
    )
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return f"failed: {r.stderr.strip()[-80:]}"
    if "bytes" not in out:
        return f"fails: {out['error'][:60]}"
    return f"{out['bytes']:,} in {out.get('seconds', 0):.0f} s"


def stats(path):
    """(peak allocated, peak reserved) of a recording, or of a snapshot's trace."""
    if path.endswith(".pickle"):
        out = subprocess.run(
            [MEMTRACK, "summary", path, "--format", "json"], check=True, capture_output=True
        ).stdout
        d = json.loads(out)["devices"][0]
        return d["peak_allocated"]["bytes"], d["peak_reserved"]["bytes"]
    out = subprocess.run([MEMTRACK, "export", path], check=True, capture_output=True).stdout
    ms = json.loads(out)["memtrack"]["memory_stats"]
    return ms["allocated_bytes.all.peak"], ms["reserved_bytes.all.peak"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=os.environ.get("MEMTRACK_PYTHON", sys.executable))
    a = ap.parse_args()
    print(f"{'program':<20} {'series':<10} {'H100':>15} {'estimate':>15} {'diff':>8} {'floor':>6}  ok   wall")
    peers = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (prog, argv, conf, h100, f_alloc, f_res, peer_name) in enumerate(CASES):
            out = os.path.join(tmp, f"{k}.pkl")
            env = dict(os.environ)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if conf is not None:
                env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            # (the capture script also writes its snapshot, empty under estimate)
            extra = ["--out", os.path.join(tmp, f"{k}.snap")] if argv is CAPTURE else []
            t = time.time()
            r = subprocess.run(
                [MEMTRACK, "estimate", "-o", out, "--", a.python, *argv, *extra],
                capture_output=True,
                text=True,
                env=env,
            )
            wall = time.time() - t
            # (exit 1: it does not fit, and the file says so; other codes are the program's)
            if r.returncode not in (0, 1) or not os.path.exists(out):
                print(f"{prog}: not estimated (exit {r.returncode}): {r.stderr.strip()[-300:]}")
                continue
            real, est = stats(h100), stats(out)
            for name, i, floor in (("allocated", 0, f_alloc), ("reserved", 1, f_res)):
                diff = (est[i] - real[i]) / real[i]
                ok = "-" if floor is None else ("yes" if abs(diff) <= floor else "NO")
                fl = "-" if floor is None else f"±{floor:.0%}"
                print(
                    f"{prog:<20} {name:<10} {real[i]:>15,} {est[i]:>15,} {diff:>+8.2%} {fl:>6}  {ok:<4} {wall:5.1f}s"
                )
            peers.append((prog, peer_name))
    # the peers' figures count tensors (MemTracker) or parameters (accelerate): no reserved
    print(f"\n{'program':<20} {'MemTracker + FakeTensorMode on cpu (peak)':<70} accelerate estimate-memory (training, Adam, fp32)")
    for prog, peer_name in peers:
        mt = peer(a.python, "memtracker", peer_name)
        acc = peer(a.python, "accelerate", peer_name)
        print(f"{prog:<20} {mt:<70} {acc}")


if __name__ == "__main__":
    main()
