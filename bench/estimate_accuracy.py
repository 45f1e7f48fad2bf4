"""`memtrack estimate` against the real H100 recordings in fixtures/record/: peak allocated and
peak reserved, side by side, with the difference and the floor each is held to.

    MEMTRACK=target/release/memtrack python3 bench/estimate_accuracy.py [--python PY]

Each program runs under `memtrack estimate` (default --gpu H100-80GB) with the Python given
(it needs torch; gpt2_train.py also transformers, resnet_train.py torchvision), and each
file's `memory_stats` is read back with `memtrack export`.
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
# (program, H100 recording, floor on peak allocated, floor on peak reserved)
CASES = [
    ("gpt2_train.py", "h100_gpt2_train.pkl", 0.03, 0.05),
    ("resnet_train.py", "h100_resnet18_train.pkl", None, 0.10),
]


def stats(path):
    out = subprocess.run([MEMTRACK, "export", path], check=True, capture_output=True).stdout
    ms = json.loads(out)["memtrack"]["memory_stats"]
    return ms["allocated_bytes.all.peak"], ms["reserved_bytes.all.peak"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=os.environ.get("MEMTRACK_PYTHON", sys.executable))
    a = ap.parse_args()
    rec = os.path.join(ROOT, "fixtures", "record")
    print(f"{'program':<16} {'series':<10} {'H100':>15} {'estimate':>15} {'diff':>8} {'floor':>6}  ok   wall")
    with tempfile.TemporaryDirectory() as tmp:
        for prog, h100, f_alloc, f_res in CASES:
            out = os.path.join(tmp, prog + ".pkl")
            t = time.time()
            r = subprocess.run(
                [MEMTRACK, "estimate", "-o", out, "--", a.python, os.path.join(rec, prog)],
                capture_output=True,
                text=True,
            )
            wall = time.time() - t
            if not os.path.exists(out):
                print(f"{prog}: not estimated (exit {r.returncode}): {r.stderr.strip()[-300:]}")
                continue
            real, est = stats(os.path.join(rec, h100)), stats(out)
            for name, i, floor in (("allocated", 0, f_alloc), ("reserved", 1, f_res)):
                diff = (est[i] - real[i]) / real[i]
                ok = "-" if floor is None else ("yes" if abs(diff) <= floor else "NO")
                fl = "-" if floor is None else f"±{floor:.0%}"
                print(
                    f"{prog:<16} {name:<10} {real[i]:>15,} {est[i]:>15,} {diff:>+8.2%} {fl:>6}  {ok:<4} {wall:5.1f}s"
                )


if __name__ == "__main__":
    main()
