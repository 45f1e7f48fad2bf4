"""Independent check of `summary`'s usage by annotation, for tests/summary_annotations.rs.

Usage: annotation_usage.py SNAPSHOT

Prints JSON: per device, for each external annotation within its trace's time span, the
requested bytes allocated at that time, run backwards from the end: what the final segments
hold in active_allocated blocks, minus what the events stamped after the time added (alloc:
+size, free_requested: -size). memtrack runs forwards from the trace's start instead.
"""
import json
import pickle
import sys

with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
out = {}
for device, events in enumerate(snap["device_traces"]):
    times = [e["time_us"] for e in events if e.get("time_us") is not None]
    if not times:
        continue
    final = sum(
        b.get("requested_size", b["size"])
        for s in snap["segments"]
        if s["device"] == device
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    )
    delta = {"alloc": 1, "free_requested": -1}
    rows = []
    for a in snap.get("external_annotations", []):
        if a.get("device", device) != device or not times[0] <= a["time_us"] <= times[-1]:
            continue
        after = sum(
            delta.get(e["action"], 0) * e["size"]
            for e in events
            if e.get("time_us") is not None and e["time_us"] > a["time_us"]
        )
        rows.append({"name": a["name"], "stage": a["stage"], "time_us": a["time_us"],
                     "allocated_bytes": final - after})
    out[str(device)] = rows
print(json.dumps(out))
