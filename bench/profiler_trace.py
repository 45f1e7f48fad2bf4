"""memtrack summary of a torch.profiler trace against Python's json.load of the same file.

    python bench/profiler_trace.py [TRACE] [--mb 200] [--memtrack target/release/memtrack]

Without TRACE, writes bench/data/profiler/big.pt.trace.json (gitignored): the real fixture
fixtures/profiler/export_chrome_trace.json's events repeated, shifted in time, until the
file is --mb megabytes (Kineto's own layout, every kind of event). Prints each side's wall
time and peak resident memory (RSS, from wait4), and the ratios.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(path, mb):
    with open(os.path.join(ROOT, "fixtures/profiler/export_chrome_trace.json")) as f:
        d = json.load(f)
    events = d.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(
        e["ts"] for e in events if "ts" in e
    )
    head = json.dumps(d, indent=2)[:-2] + ',\n  "traceEvents": [\n'
    os.makedirs(os.path.dirname(path), exist_ok=True)
    target = mb << 20
    with open(path, "w") as out:
        out.write(head)
        written, rep, first = len(head), 0, True
        while written < target:
            shift = rep * (span + 1000.0)
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = round(e2["ts"] + shift, 3)
                if e2.get("name") == "[memory]":
                    e2["args"] = dict(e2["args"], Addr=e2["args"]["Addr"] + rep)
                s = ("" if first else ",\n") + json.dumps(e2, indent=2)
                first = False
                out.write(s)
                written += len(s)
            rep += 1
        out.write("\n]\n}\n")
    return path


def run(cmd):
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{cmd} failed")
    return wall, usage.ru_maxrss * 1024  # Linux: KiB


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--memtrack", default=os.path.join(ROOT, "target/release/memtrack"))
    a = ap.parse_args()
    path = a.trace or os.path.join(ROOT, "bench/data/profiler/big.pt.trace.json")
    if not a.trace and (not os.path.exists(path) or os.path.getsize(path) < (a.mb << 20)):
        generate(path, a.mb)
    size = os.path.getsize(path)
    loader = "import json,sys; json.load(open(sys.argv[1]))"
    if path.endswith(".gz"):
        loader = "import json,gzip,sys; json.load(gzip.open(sys.argv[1]))"
    py_wall, py_rss = run([sys.executable, "-c", loader, path])
    mt_wall, mt_rss = run([a.memtrack, "summary", path])
    print(f"trace: {path} ({size / 2**20:.1f} MiB)")
    print(f"python json.load:  {py_wall:7.2f} s  RSS {py_rss / 2**20:8.1f} MiB")
    print(f"memtrack summary:  {mt_wall:7.2f} s  RSS {mt_rss / 2**20:8.1f} MiB")
    print(f"speed-up: {py_wall / mt_wall:.1f}x; memtrack RSS / file size: {mt_rss / size:.2f}")


if __name__ == "__main__":
    main()
