"""Which segments of a snapshot contradict themselves, read with the standard library only:
blocks that do not add up to the segment's total_size (what torch's _memory_viz stops at with
"Segment size mismatch"), or allocated_size / active_size counters that are not what the
blocks add up to. Prints a JSON list of [device, address, total_size, block_bytes]."""
import json
import pickle
import sys

with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
segments = snap["segments"] if isinstance(snap, dict) else snap
out = []
for seg in segments:
    blocks = seg.get("blocks") or []
    if not blocks:
        continue
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    if (
        total != seg["total_size"]
        or seg.get("allocated_size", allocated) != allocated
        or seg.get("active_size", active) != active
    ):
        out.append([seg["device"], seg["address"], seg["total_size"], total])
print(json.dumps(out))
