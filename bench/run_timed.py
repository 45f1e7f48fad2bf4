"""Run commands side by side and report wall time, peak RSS and the ratio between them.

Imported by the bench/*.py scripts. Each command runs REPEAT times; the best wall time counts
(machines are noisy, the minimum is the least disturbed run), peak RSS is the largest seen.
"""
import os
import subprocess
import time


def run(cmd, repeat=3, env=None):
    best, rss = None, 0
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        if status != 0:
            raise SystemExit(f"failed ({status}): {' '.join(map(str, cmd))}\n{err}")
        best = wall if best is None else min(best, wall)
        rss = max(rss, usage.ru_maxrss)  # KiB on Linux
    return best, rss


def report(title, ours, theirs, floor):
    (tw, trss), (pw, prss) = ours, theirs
    ratio = pw / tw
    verdict = "ok" if ratio >= floor else f"BELOW the {floor}x floor"
    print(f"{title}")
    print(f"  memtrack : {tw:8.3f} s  {trss / 1024:8.1f} MiB peak RSS")
    print(f"  PyTorch  : {pw:8.3f} s  {prss / 1024:8.1f} MiB peak RSS")
    print(f"  ratio    : {ratio:8.1f}x faster ({verdict})")
    return ratio
