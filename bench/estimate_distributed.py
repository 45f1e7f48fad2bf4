"""`memtrack estimate` of distributed jobs beside torch's FSDPMemTracker and the arithmetic,
on the same programs: a Llama-style model in bf16 with AdamW, FSDP2 over the world
(bench/estimate/llama_fsdp.py), one training step on 1 x 2048 tokens.

    MEMTRACK=target/release/memtrack python3 bench/estimate_distributed.py [--python PY]
        [--cases 8b:8,70b:64:ac] [--no-memtracker]

For each case (SIZE:WORLD[:ac]) it prints, for rank 0:
- estimate: its peak allocated and reserved, its parameters and gradients after backward (the
  root module's Post-Backward, from the file's module tables), how long it took (wall and CPU
  time) and the most memory it used (the estimate and the program together);
- arithmetic: the same by the sharding arithmetic: 2 x 2 bytes x the rank's local parameters
  (bf16 parameters and gradients; Llama's dimensions divide by these worlds, so FSDP2 adds no
  padding);
- FSDPMemTracker: its peak, under FakeTensorMode and a fake process group on the "cpu" device
  (as torchtitan estimates; on "cuda" it needs a GPU), and its time; the ratio estimate /
  FSDPMemTracker.
It needs torch and transformers; the Python is --python, else the venv of the tests.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMTRACK = os.environ.get("MEMTRACK", os.path.join(ROOT, "target", "release", "memtrack"))
PROGRAM = os.path.join(ROOT, "bench", "estimate", "llama_fsdp.py")


def timed(cmd):
    """(completed process, wall seconds, CPU seconds of the children, their max RSS in MB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r, wall, cpu, after.ru_maxrss / 1024


def states(export):
    """Parameters + gradients + optimizer states after the step: the root module's
    Post-Backward parameters and gradients, and the optimizer's states at the end."""
    ops = export["ops"]
    it = export["memtrack"]["modules"][-1]
    root = it["modules"][0]
    post = next(s for s in root["states"] if s["state"] == "Post-Backward")["calls"][0]["cuda:0"]
    return post["Parameter"], post["Gradient"], ops


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--python", default=os.path.expanduser("~/.cache/memtrack/venv/bin/python"))
    a.add_argument("--cases", default="8b:8,70b:64:ac")
    a.add_argument("--no-memtracker", action="store_true")
    args = a.parse_args()
    torchrun = os.path.join(os.path.dirname(args.python), "torchrun")
    gib = 2**30
    print(f"{'case':<12} {'estimate alloc':>15} {'reserved':>10} {'params+grads':>13} "
          f"{'arithmetic':>11} {'wall':>7} {'cpu':>7} {'max RSS':>8}   FSDPMemTracker (cpu)")
    for case in args.cases.split(","):
        size, world, *rest = case.split(":")
        ac = ["--ac"] if "ac" in rest else []
        world = int(world)
        nodes = max(1, world // 8)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "est.pkl")
            cmd = [MEMTRACK, "estimate", "--format", "json", "-o", out, "--", torchrun,
                   "--nproc-per-node", str(min(world, 8)), "--nnodes", str(nodes),
                   PROGRAM, size, *ac]
            r, wall, cpu, rss = timed(cmd)
            text = r.stdout
            program = json.loads(text.splitlines()[0])
            verdict = json.loads(text[text.index("\n{") + 1:])["verdict"]
            rank0 = out.replace(".pkl", ".rank0.pkl")
            exp = json.loads(
                subprocess.run([MEMTRACK, "export", rank0], capture_output=True, text=True).stdout
            )
        params, grads, _ = states(exp)
        arithmetic = 2 * 2 * program["local"]  # bf16 parameters and gradients
        line = (f"{case:<12} {verdict['peak_allocated_bytes'] / gib:>11.2f} GiB "
                f"{verdict['peak_reserved_bytes'] / gib:>6.2f} GiB {(params + grads) / gib:>9.2f} GiB "
                f"{arithmetic / gib:>7.2f} GiB {wall:>6.1f}s {cpu:>6.1f}s {rss:>6.0f}MB")
        if args.no_memtracker:
            print(line)
            continue
        r, mwall, mcpu, _ = timed([args.python, PROGRAM, size, "--memtracker", "--world",
                                   str(world), *ac])
        try:
            mt = json.loads(r.stdout.strip().splitlines()[-1])["peak"]
            ratio = verdict["peak_allocated_bytes"] / mt
            line += f"   {mt / gib:.2f} GiB in {mwall:.0f} s; estimate / it = {ratio:.3f}"
        except (IndexError, ValueError, KeyError, TypeError):
            line += f"   fails: {r.stderr.strip()[-120:]}"
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
