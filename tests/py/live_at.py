"""Independent replay of an allocator snapshot for tests/top_moments.rs.

Usage: live_at.py SNAPSHOT DEVICE SECONDS ANNOTATION_NAME STAGE NTH

Prints JSON: for device DEVICE, the event index each kind of moment falls on (the last event
at or before a time; the n-th oom) and, for a list of indices, the requested bytes live right
after that event: the trace's allocations not yet freed, plus blocks older than the trace that
it frees later, plus blocks live at the end that the trace never allocated. Also, for the live
blocks at the end, bytes by the innermost frame of the program's own file and by whether an
optimizer's _init* function made them.
"""
import json
import pickle
import sys

path, device, seconds, ann_name, ann_stage, ann_nth = sys.argv[1:7]
device, seconds, ann_nth = int(device), float(seconds), int(ann_nth)
with open(path, "rb") as f:
    snap = pickle.load(f)
events = snap["device_traces"][device]
blocks = [
    b
    for s in snap["segments"]
    if s["device"] == device
    for b in s["blocks"]
    if b["state"] == "active_allocated"
]


def last_at_or_before(t):
    found = None
    for i, e in enumerate(events):
        if e.get("time_us") is not None and e["time_us"] > t:
            break
        found = i
    return found


times = [e["time_us"] for e in events if e.get("time_us") is not None]
t0 = times[0]
index = {"time": last_at_or_before(t0 + round(seconds * 1e6))}
marks = [
    a
    for a in snap.get("external_annotations", [])
    if a["name"] == ann_name and a["stage"] == ann_stage and a.get("device", device) == device
]
index["annotation"] = last_at_or_before(marks[ann_nth - 1]["time_us"]) if len(marks) >= ann_nth else None
ooms = [i for i, e in enumerate(events) if e["action"] == "oom"]
index["oom"] = ooms[0] if ooms else None
index["event"] = len(events) // 3

final_live = {}
for e in events:
    if e["action"] == "alloc":
        final_live[e["addr"]] = e["size"]
    elif e["action"] == "free_requested":
        final_live.pop(e["addr"], None)
untouched = sum(b["requested_size"] for b in blocks if b["address"] not in final_live)


def live_after(m):
    live, older_freed_later = {}, 0
    at = None
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_requested":
            if e["addr"] in live:
                del live[e["addr"]]
            elif i > m:
                older_freed_later += e["size"]
        if i == m:
            at = sum(live.values())
    return at + older_freed_later + untouched


by_user, optimizer_state = {}, 0
for b in blocks:
    frames = b.get("frames", [])
    for fr in frames:
        if fr["filename"].endswith("gpt2_train.py"):
            key = "gpt2_train.py:%d" % fr["line"]
            by_user[key] = by_user.get(key, 0) + b["requested_size"]
            break
    if any("/torch/optim/" in fr["filename"] and fr["name"].startswith("_init") for fr in frames):
        optimizer_state += b["requested_size"]

print(
    json.dumps(
        {
            "index": index,
            "live_after": {str(i): live_after(i) for i in index.values() if i is not None},
            "end_by_user_line": by_user,
            "end_optimizer_state": optimizer_state,
        }
    )
)
