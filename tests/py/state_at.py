"""Independent check of `segments --at`, for tests/segments_at.rs.

Usage: state_at.py SNAPSHOT DEVICE INDEX

Prints JSON: right after trace event INDEX of device DEVICE, the requested bytes allocated and
the bytes reserved in segments, run back from the final segments by Python's own reading of
the pickle: the final totals minus what the events after INDEX added (alloc +size,
free_requested -size; segment_alloc and segment_map +size, segment_free and segment_unmap
-size), and how many whole segments (cudaMalloc'd, not expandable) stood then.
"""
import json
import pickle
import sys

path, device, index = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    snap = pickle.load(f)
segs = [s for s in snap["segments"] if s["device"] == device]
allocated = sum(
    b.get("requested_size", b["size"])
    for s in segs
    for b in s["blocks"]
    if b["state"] == "active_allocated"
)
reserved = sum(s["total_size"] for s in segs)
whole = sum(1 for s in segs if not s.get("is_expandable", False))
for e in snap["device_traces"][device][index + 1:]:
    a, n = e["action"], e["size"]
    allocated -= {"alloc": n, "free_requested": -n}.get(a, 0)
    reserved -= {"segment_alloc": n, "segment_map": n, "segment_free": -n, "segment_unmap": -n}.get(a, 0)
    whole -= {"segment_alloc": 1, "segment_free": -1}.get(a, 0)
print(json.dumps({"allocated": allocated, "reserved": reserved, "segments": whole}))
