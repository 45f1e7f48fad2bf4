#!/usr/bin/env python3
"""What PyTorch's own torch.cuda._memory_viz computes on snapshot files, as JSON on stdout.

  check_memviz.py FILE...

For each file: segsum()'s totals (the real function runs, so its own accounting assertions
hold, and its printed totals are kept), trace()'s lines, the correct trace totals, and bytes by
allocation site computed with _memory_viz's _frame_filter (and memtrack's rule for a stack
with no Python frame, written again here from docs/snapshots.md). The Rust test `memviz_crosscheck`
compares them with memtrack's --format json. Exit 3 when torch cannot be imported.
"""
import json
import re
import pickle
import sys

try:
    from torch.cuda import _memory_viz as mv
except Exception as e:  # noqa: BLE001
    print(f"torch not importable: {e}", file=sys.stderr)
    sys.exit(3)


def load(path):
    with open(path, "rb") as f:
        data = pickle.load(f)
    if isinstance(data, list):  # memory_snapshot(): segments only, as _memory_viz._read does
        data = {"segments": data, "device_traces": []}
    return data


def segsum_totals(data):
    text = mv.segsum(data)  # raises on any accounting error
    printed = {}
    for line in text.splitlines():
        for key in ("segments", "total_reserved", "total_allocated", "total_free"):
            if line.startswith(key + ": "):
                printed[key] = line[len(key) + 2:]
    reserved = allocated = ext = internal = 0
    for seg in data["segments"]:
        reserved += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                _, size = mv._block_extra(b)
                allocated += size
                internal += b["size"] - size
            else:
                ext += b["size"]
    return {"reserved": reserved, "allocated": allocated, "free_external": ext,
            "free_internal": internal, "printed": printed}


def is_agent_file(filename):
    """memtrack's agent: a file of its package, or the single file it was before (as
    model::is_agent_file)."""
    if filename.endswith("_memtrack_agent.py"):
        return True
    parts = filename.replace("\\", "/").split("/")
    return len(parts) >= 2 and parts[-2] == "_memtrack_agent"


def site_of(frames):
    kept = [f for f in frames if mv._frame_filter(f["name"], f["filename"])]
    if not kept:
        return "<non-python>"
    # under `memtrack record --snapshot`, the program's code is below the agent's dispatch frame
    agent = [i for i, f in enumerate(kept) if is_agent_file(f["filename"])]
    if agent and agent[0] + 1 < len(kept):
        kept = kept[agent[0] + 1:]
    py = [f for f in kept if f["filename"].endswith(".py")]
    if py:
        f = py[0]
        return f"{f['filename']}:{f['line']}:{f['name']}"
    # no Python frame (the autograd engine's thread): the autograd node that ran, else the
    # ATen op called, else the innermost frame's function without its arguments
    for f in kept:
        m = re.search(r"torch::autograd::generated::(\w+)::apply\(", f["name"])
        if m:
            return f"<backward {m.group(1)}>"
    for f in kept:
        m = re.match(r"at::_ops::(\w+)::call\(", f["name"])
        if m:
            return f"<aten::{m.group(1)}>"
    return "<" + kept[0]["name"].split("(")[0] + ">"


def sites_at_end(data):
    out = {}
    for seg in data["segments"]:
        dev = seg.get("device", 0)
        for b in seg["blocks"]:
            if b["state"] != "active_allocated":
                continue
            frames, size = mv._block_extra(b)
            if "frames" not in b and "history" in b:
                key = site_of(b["history"][0]["frames"]) if "frames" in b["history"][0] else "<no-context>"
            else:
                key = site_of(frames)
            d = out.setdefault(str(dev), {})
            d[key] = d.get(key, 0) + size
    return out


def trace_info(data):
    devices = {}
    for i, entries in enumerate(data.get("device_traces", [])):
        if not entries:
            continue
        alloc = sum(e["size"] for e in entries if e["action"] == "alloc")
        freed = sum(e["size"] for e in entries if e["action"] == "free_completed")
        devices[str(i)] = {"entries": len(entries), "alloc_bytes": alloc,
                           "free_completed_bytes": freed, "net_bytes": alloc - freed}
    lines = None
    total = sum(len(t) for t in data.get("device_traces", []))
    if 0 < total <= 30000:
        # its TOTAL MEM line has no newline, so the next device's header runs into it; those
        # totals are wrong anyway (see docs/snapshots.md) and are checked separately above
        text = re.sub(r"TOTAL MEM: -?[0-9.]+[KMGTPEZY]?i?B", "\n", mv.trace(data))
        lines = [l for l in text.splitlines() if l]
    return devices, lines


def main():
    result = {}
    for path in sys.argv[1:]:
        data = load(path)
        devices, lines = trace_info(data)
        result[path] = {"segsum": segsum_totals(data), "sites_at_end": sites_at_end(data),
                        "trace": devices, "trace_lines": lines,
                        "format_size": {str(n): mv._format_size(n) for n in
                                        (0, 1, 1023, 1024, 1536, 1331, 20 << 20, 3 << 30,
                                         123456789, 987654321012)}}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
