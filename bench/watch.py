#!/usr/bin/env python3
"""Cost of the terminal UI (docs/watch.md, "Cost and scale"), run in tmux at 100x30.

  python3 bench/watch.py journal [--ops N] [--rate OPS_PER_S] [--seconds S] [--bin PATH]
  python3 bench/watch.py snapshot SNAPSHOT [--bin PATH]

journal: writes a record journal of N ops (default 10,000,000) as the agent writes it (its
spool segments, protocol.py's records): a training loop of 12 modules, each iteration their
forward (40 ops each, an activation per op), their backward (30 ops each, a temporary per op),
an Adam step of 100 ops: 940 ops and ~3,900 slots an iteration. Then `memtrack watch` follows
it: the time to catch up (the header shows the last iteration), its CPU while the job is quiet,
and while a writer adds iterations at RATE ops a second for S seconds (a fast job: the agent
of a real one writes far fewer), its CPU as a share of one core (utime + stime from /proc)
beside the writer's own; and its peak memory (VmHWM) after each stage. PyTorch has no live
view to run beside it; the ratio printed is memtrack's CPU to the writer's.

snapshot: the time until `memtrack view --tui SNAPSHOT` shows its first screen (the timeline
drawn and what is live at the first OOM, else the peak, worked out), beside the time Python's
pickle.load takes on the same file (what PyTorch's memory_viz does before drawing anything).
"""
import argparse
import array
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python/memtrack/_memtrack_agent"))
import protocol as P  # noqa: E402  (the agent's wire constants)

SEGMENT_SLOTS = 1 << 21  # the agent's SPOOL_SLOTS: 16 MiB a segment
MODULES = 12
OP_NAMES = ["mm.default", "addmm.default", "relu.default", "add.Tensor", "mul.Tensor",
            "t.default", "view.default", "_softmax.default", "mm.default_bw", "_foreach_add_.List"]


def message(obj):
    """The slots of a JSON message record."""
    b = json.dumps(obj).encode()
    b += b"\0" * (-len(b) % 8)
    return [P.JSON, len(json.dumps(obj).encode())] + list(array.array("q", b))


def header():
    recs = message({"t": "hello", "pid": 4242, "ppid": 1, "argv": ["python", "train.py"],
                    "backend": "cpu", "torch": "2.15.0", "observer": "compiled"})
    for i, name in enumerate(OP_NAMES):
        recs += message({"t": "op", "id": i, "name": name})
    recs += message({"t": "name", "id": 0, "name": "Net"})
    for m in range(MODULES):
        recs += message({"t": "name", "id": 1 + m, "name": f"Net.layers.{m}"})
    recs += message({"t": "name", "id": 1 + MODULES, "name": "Adam"})
    for p in range(MODULES):  # the parameters, once
        recs += [P.ADD, 1_000_000 + p, P.PARAM, -1, 1 << 20]
    return recs


def iteration(first):
    """One training step's records: 940 ops."""
    r = [] if first else [P.ITER]
    r += [P.MARK, 0, P.MOD, 0, 0, 0, 0, 1 << 16, P.SNAP, 0, P.PRE_FW, P.PUSH, 0, P.PUSH_FORWARD]
    key = 0
    for m in range(MODULES):
        mk, name = 1 + m, 1 + m
        r += [P.MOD, mk, name, 1 << 20, 0, 1 << 16, P.SNAP, mk, P.PRE_FW, P.PUSH, name, P.PUSH_FORWARD]
        for k in range(40):
            r += [P.ADD, key, P.ACT, -1, 4096 * (1 + k % 4), (k % 8) << 2]
            key += 1
        r += [P.SNAP, mk, P.POST_FW, P.POP, name]
    r += [P.POP, 0, P.SNAP, 0, P.POST_FW, P.MARK, 1]
    temp = 100_000
    for m in reversed(range(MODULES)):
        mk, name = 1 + m, 1 + m
        r += [P.PUSH, name, P.PUSH_BACKWARD, P.SNAP, mk, P.PRE_BW]
        for k in range(30):
            r += [P.ADD, temp, P.TEMP, -1, 8192, ((8 + k % 2) << 2) | 1, P.DEL, temp]
            temp += 1
        for k in range(40):
            r += [P.DEL, m * 40 + k]
        r += [P.SNAP, mk, P.POST_BW, P.POP, name]
    r += [P.RESET, P.OPT_BEGIN, 1 + MODULES]
    for k in range(100):
        r += [(9 << 2) | 2]
    r += [P.OPT_END]
    return array.array("q", r)


class Spool:
    """The agent's spool in `folder`: segments of SEGMENT_SLOTS, slot 0 the next free slot,
    published after the records it covers are written."""

    def __init__(self, folder):
        self.folder, self.segment, self.f, self.at = folder, -1, None, 0

    def next_segment(self):
        if self.f:
            self.publish()
            self.f.close()
        self.segment += 1
        path = os.path.join(self.folder, f"spool-4242-{self.segment:04d}.bin")
        self.f = open(path, "xb+")
        os.chmod(path, 0o600)
        self.f.truncate(SEGMENT_SLOTS * 8)
        self.at = 1
        self.publish()

    def write(self, recs):
        if self.f is None or self.at + len(recs) > SEGMENT_SLOTS:
            self.next_segment()
        self.f.seek(self.at * 8)
        self.f.write(recs.tobytes())
        self.at += len(recs)

    def publish(self):
        self.f.flush()
        self.f.seek(0)
        self.f.write(array.array("q", [self.at]).tobytes())
        self.f.flush()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Tmux:
    def __init__(self, cmd, cwd):
        self.sock = f"memtrack-bench-{os.getpid()}"
        self.run("new-session", "-d", "-x", "100", "-y", "30", "-c", cwd, "exec " + cmd)
        self.pid = int(self.run("list-panes", "-F", "#{pane_pid}").strip())

    def run(self, *args):
        return subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args],
                              check=True, capture_output=True, text=True).stdout

    def screen(self):
        return self.run("capture-pane", "-p")

    def wait(self, test, limit=600):
        start = time.perf_counter()
        while time.perf_counter() - start < limit:
            s = self.screen()
            if test(s):
                return time.perf_counter() - start, s
            time.sleep(0.05)
        raise SystemExit(f"the screen never showed it:\n{self.screen()}")

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


def header_iteration(screen):
    m = re.search(r"iteration (\d+) ·", screen.splitlines()[0] if screen else "")
    return int(m.group(1)) if m else None


def journal(a):
    work = tempfile.mkdtemp(prefix="memtrack-watch-bench-")
    folder = os.path.join(work, "run.pkl.journal-bench0001")
    os.mkdir(folder, 0o700)
    step = iteration(False)
    per = 940
    n = a.ops // per
    t = time.perf_counter()
    spool = Spool(folder)
    spool.write(array.array("q", header()) + iteration(True))
    for _ in range(n - 1):
        spool.write(step)
    spool.publish()
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"journal: {n * per:,} ops, {n:,} iterations, {spool.segment + 1} segments "
          f"({size / 2**20:.0f} MiB sparse files) written in {time.perf_counter() - t:.1f} s")
    ui = Tmux(f"{a.bin} watch {folder}", work)
    try:
        took, _ = ui.wait(lambda s: header_iteration(s) == n)
        cpu = cpu_seconds(ui.pid)
        print(f"catch-up: the header shows iteration {n:,} after {took:.2f} s wall, "
              f"{cpu:.2f} s CPU; peak RSS {peak_mib(ui.pid):.0f} MiB")
        # the job quiet: what watching costs by itself
        c0, w0 = cpu_seconds(ui.pid), time.perf_counter()
        time.sleep(a.seconds)
        quiet = (cpu_seconds(ui.pid) - c0) / (time.perf_counter() - w0)
        print(f"quiet job, {a.seconds:.0f} s: {100 * quiet:.2f}% of a core")
        # the job running: iterations added at `rate` ops a second
        c0, w0, wc0 = cpu_seconds(ui.pid), time.perf_counter(), time.process_time()
        added = 0
        while time.perf_counter() - w0 < a.seconds:
            due = int((time.perf_counter() - w0) * a.rate / per) - added
            for _ in range(max(due, 0)):
                spool.write(step)
                added += 1
            spool.publish()
            time.sleep(0.05)
        wall = time.perf_counter() - w0
        watch = (cpu_seconds(ui.pid) - c0) / wall
        writer = (time.process_time() - wc0) / wall
        took, _ = ui.wait(lambda s: header_iteration(s) == n + added, limit=60)
        print(f"running job, {added * per / wall:,.0f} ops/s for {wall:.0f} s (+{added:,} "
              f"iterations): watch {100 * watch:.2f}% of a core, the writer {100 * writer:.2f}% "
              f"(ratio {watch / max(writer, 1e-9):.2f}); caught up {took:.2f} s after the last; "
              f"peak RSS {peak_mib(ui.pid):.0f} MiB")
    finally:
        ui.close()
        shutil.rmtree(work, ignore_errors=True)


def snapshot(a):
    size = os.path.getsize(a.snapshot)
    work = tempfile.mkdtemp(prefix="memtrack-watch-bench-")
    try:
        t = time.perf_counter()
        ui = Tmux(f"{a.bin} view --tui {a.snapshot}", work)
        try:
            chart, _ = ui.wait(lambda s: "allocator snapshot" in s or "profiler trace" in s)
            ui.wait(lambda s: re.search(r"live at event [\d,]+:", s) is not None)
            live = time.perf_counter() - t
            rss = peak_mib(ui.pid)
        finally:
            ui.close()
        print(f"view --tui {os.path.basename(a.snapshot)} ({size / 1e9:.2f} GB): timeline drawn "
              f"after {chart:.2f} s, what is live at the moment after {live:.2f} s "
              f"(wall, from the start); peak RSS {rss:.0f} MiB")
        t = time.perf_counter()
        c = time.process_time()
        subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))",
                        a.snapshot], check=True)
        py = time.perf_counter() - t
        print(f"python pickle.load of the same file: {py:.2f} s wall "
              f"(ratio memtrack/pickle.load {live / py:.2f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["journal", "snapshot"])
    ap.add_argument("snapshot", nargs="?")
    ap.add_argument("--ops", type=int, default=10_000_000)
    ap.add_argument("--rate", type=float, default=200_000, help="ops a second while running")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/memtrack"))
    a = ap.parse_args()
    if not shutil.which("tmux"):
        raise SystemExit("bench/watch.py runs the UI in tmux: install it (apt-get install tmux)")
    if a.what == "journal":
        journal(a)
    elif not a.snapshot:
        raise SystemExit("snapshot: name the file (bench/gen_big_snapshot.py writes one)")
    else:
        snapshot(a)


if __name__ == "__main__":
    main()
