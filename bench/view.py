#!/usr/bin/env python3
"""Scale of `memtrack view` (issue 24 item 4) on one snapshot: time until the server answers,
bytes of the first page (the page, its overview and its first tile), the server's memory, and
the latency of zoom requests (p50, p95, max over random windows), asked as the page asks
them (x on the event index, bands by category; `--axis time --by site` as before), and of the
segment timeline's tiles of the same windows.

    python3 bench/view.py [SNAPSHOT] [--requests N] [--bin PATH] [--axis event|time] [--by category|site]

SNAPSHOT defaults to bench/data/snapshot_1000000.pickle (bench/snapshot.sh writes it). The
binary is target/release/memtrack (built if missing). PyTorch's own viewer (memory_viz) runs in
the browser and loads the whole file into the tab, so there is no server to time beside ours:
its ceiling (~1 GB files) is what this compares against.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kib(pid, key="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def get(url):
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return body, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshot", nargs="?", default=os.path.join(ROOT, "bench/data/snapshot_1000000.pickle"))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/memtrack"))
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=460)
    ap.add_argument("--axis", choices=["event", "time"], default="event",
                    help="the tiles' x: the event index (the page's default) or time")
    ap.add_argument("--by", choices=["category", "site"], default="category",
                    help="bands by category (the page's default) or by site")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    size = os.path.getsize(a.snapshot)
    started = time.perf_counter()
    p = subprocess.Popen([a.bin, "view", "--no-browser", "--port", "0", a.snapshot],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = p.stdout.readline().strip()
        base, token = url.split("/?token=")
        api = lambda path, **q: base + path + "?" + "&".join(
            f"{k}={v}" for k, v in dict(q, token=token).items())
        overview, _ = get(api("/api/overview"))
        ready = time.perf_counter() - started
        ov = json.loads(overview)["timeline"]
        x0, x1 = ov["x_range"] if a.axis == "time" else (0, ov["events"] - 1)
        extra = {} if (a.axis, a.by) == ("time", "site") else {"axis": a.axis, "by": a.by}
        page, _ = get(url)
        first_tile, first_s = get(api("/api/tile", x0=x0, x1=x1, width=a.width, height=a.height, **extra))
        first_bytes = len(page) + len(overview) + len(first_tile)
        rng = random.Random(24)
        lat, seg_lat = [], []
        for _ in range(a.requests):
            span = (x1 - x0) / 2 ** rng.uniform(0, 12)
            lo = rng.uniform(x0, x1 - span)
            _, s = get(api("/api/tile", x0=lo, x1=lo + span, width=a.width, height=a.height, **extra))
            lat.append(s)
            # the same window's segment timeline, as the page asks it with segments on
            seg_axis = {"axis": a.axis} if extra else {}
            _, s = get(api("/api/segment_tile", x0=lo, x1=lo + span, width=a.width, height=170, **seg_axis))
            seg_lat.append(s)
        lat.sort()
        seg_lat.sort()
        pct = lambda q, l=lat: l[min(len(l) - 1, int(q * len(l)))] * 1000
        event = ov["peak"]["index"] if ov["peak"] else 0
        _, live_s = get(api("/api/live", event=event))
        _, seg_s = get(api("/api/segments", event=event))
        rss = rss_kib(p.pid)
        hwm = rss_kib(p.pid, "VmHWM")
    finally:
        p.terminate()
        p.wait()
    print(f"{a.snapshot}: {size / 1e6:.1f} MB, {ov['events']:,} events, {ov['allocations']:,} allocations")
    print(f"answers after       {ready:.2f} s (target < 15 s on 1.1 GB)")
    print(f"first page          {first_bytes / 1e3:.0f} kB (page {len(page) / 1e3:.0f} kB, tile {len(first_tile) / 1e3:.0f} kB in {first_s * 1000:.0f} ms; target < 5 MB)")
    print(f"RSS                 {rss / 1024:.0f} MiB now, {hwm / 1024:.0f} MiB at most (target < 1 GB)")
    print(f"zoom ({a.requests} tiles)   p50 {pct(0.5):.0f} ms, p95 {pct(0.95):.0f} ms, max {lat[-1] * 1000:.0f} ms (target p95 <= 200 ms)")
    print(f"segment timeline    p50 {pct(0.5, seg_lat):.0f} ms, p95 {pct(0.95, seg_lat):.0f} ms, max {seg_lat[-1] * 1000:.0f} ms (the same windows)")
    print(f"click at the peak   live table {live_s * 1000:.0f} ms, segments {seg_s * 1000:.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
