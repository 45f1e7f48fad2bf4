#!/usr/bin/env python3
"""Every snapshot command of memtrack on one capture: wall time and peak RSS against the limits
of issue 24 (item 4), and `memtrack summary` against PyTorch's `_memory_viz stats`.

  bench/commands_at_scale.py CAPTURE [--limit-s S --limit-mb MB] [--runs N]
  bench/commands_at_scale.py CAPTURE --ratio [--pairs N]

Limits by default follow the capture's size: a file of 5 GB or more must take < 20 s and
< 1 GB (1024 MiB) per command, a smaller one <= 3.5 s and < 400 MB (MiB). Each command runs
`--runs` times (default 1; the fastest wall and the highest RSS are reported), its output to
a temporary directory (text to /dev/null). `allocator` and `cycles` read `memtrack record`
files only, so they do not apply to a snapshot.

--ratio times `memtrack summary CAPTURE` and `python -m torch.cuda._memory_viz stats CAPTURE`
one after the other, `--pairs` times (default 7), and prints the median of the pairs' ratios
(the machine may be shared: a pair is disturbed alike). Issue 24 asks >= 50x on the 1M-event
capture (bench/data/snapshot_1000000.pickle, bench/snapshot.sh writes it).

Env: MEMTRACK (binary; default target/release/memtrack, built if missing), TORCH_PYTHON
(interpreter with torch; default ~/.cache/memtrack/venv/bin/python). Standard library only.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd):
    """(wall seconds, CPU seconds (user + system), max RSS in KiB) of one run of cmd, its output
    discarded."""
    with tempfile.NamedTemporaryFile("r") as t:
        start = time.monotonic()
        r = subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%e %U %S %M"] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.monotonic() - start
        if r.returncode != 0:
            sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr.decode()[-2000:]}")
        _, user, system, rss = t.read().split()[-4:]
        return wall, float(user) + float(system), int(rss)


def commands(binary, capture, out):
    o = lambda name: os.path.join(out, name)
    return [
        ("summary", [binary, "summary", capture]),
        ("top", [binary, "top", capture]),
        ("top --at end", [binary, "top", capture, "--at", "end"]),
        ("top --folded", [binary, "top", "--folded", capture]),
        ("trace", [binary, "trace", capture]),
        ("plot", [binary, "plot", capture, "-o", o("timeline.svg")]),
        ("plot --stacked svg", [binary, "plot", "--stacked", capture, "-o", o("stacked.svg")]),
        ("plot --stacked html", [binary, "plot", "--stacked", capture, "-o", o("stacked.html")]),
        ("segments", [binary, "segments", capture]),
        ("segments --at peak", [binary, "segments", capture, "--at", "peak"]),
        ("segments -o svg", [binary, "segments", capture, "-o", o("segments.svg")]),
        ("simulate", [binary, "simulate", capture]),
        ("export", [binary, "export", capture, "-o", o("export.json")]),
        ("diff (itself)", [binary, "diff", capture, capture]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture")
    ap.add_argument("--limit-s", type=float)
    ap.add_argument("--limit-mb", type=float)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", help="comma-separated command names (as printed)")
    ap.add_argument("--ratio", action="store_true", help="summary vs _memory_viz stats only")
    ap.add_argument("--pairs", type=int, default=7)
    a = ap.parse_args()
    binary = os.environ.get("MEMTRACK", os.path.join(ROOT, "target/release/memtrack"))
    if not os.path.exists(binary):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    size = os.path.getsize(a.capture)
    print(f"{a.capture}: {size:,} bytes ({size / 1e9:.2f} GB)")

    if a.ratio:
        python = os.environ.get("TORCH_PYTHON",
                                os.path.expanduser("~/.cache/memtrack/venv/bin/python"))
        ratios, ours, theirs = [], [], []
        for _ in range(a.pairs):
            w_ours, _, _ = timed([binary, "summary", a.capture])
            w_theirs, _, _ = timed([python, "-m", "torch.cuda._memory_viz", "stats", a.capture])
            ours.append(w_ours)
            theirs.append(w_theirs)
            ratios.append(w_theirs / w_ours)
            print(f"  pair: memtrack summary {w_ours:.3f} s, _memory_viz stats {w_theirs:.2f} s:"
                  f" {w_theirs / w_ours:.1f}x", flush=True)
        r = statistics.median(ratios)
        print(f"memtrack summary {statistics.median(ours):.3f} s, _memory_viz stats"
              f" {statistics.median(theirs):.2f} s (medians of {a.pairs});"
              f" median ratio {r:.1f}x (>= 50x: {'PASS' if r >= 50 else 'FAIL'})")
        return

    big = size >= 5e9
    limit_s = a.limit_s if a.limit_s is not None else (20.0 if big else 3.5)
    limit_mb = a.limit_mb if a.limit_mb is not None else (1024.0 if big else 400.0)
    strict = big  # "< 20 s" at 10 GB, "<= 3.5 s" at 1.1 GB
    only = set(a.only.split(",")) if a.only else None
    failed = 0
    with tempfile.TemporaryDirectory() as out:
        print(f"{'command':<22} {'wall':>8} {'cpu':>8} {'max RSS':>10}   limits {limit_s:g} s,"
              f" {limit_mb:g} MiB")
        for name, cmd in commands(binary, a.capture, out):
            if only is not None and name not in only:
                continue
            runs = [timed(cmd) for _ in range(a.runs)]
            wall, cpu, _ = min(runs)
            rss_mb = max(m for _, _, m in runs) / 1024
            ok_s = wall < limit_s if strict else wall <= limit_s
            ok = ok_s and rss_mb < limit_mb
            failed += not ok
            print(f"{name:<22} {wall:7.2f}s {cpu:7.2f}s {rss_mb:8.1f}MiB   {'PASS' if ok else 'FAIL'}",
                  flush=True)
    print(f"{failed} over the limits" if failed else "every command within the limits")


if __name__ == "__main__":
    main()
