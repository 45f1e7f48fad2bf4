"""Run PyTorch's own MemTracker on an example's model and inputs; print JSON shaped like
`memtrack modules --format json --depth 99 --iteration all`.

    python tests/py/memtracker_reference.py examples/mlp_batchnorm.py --steps 3

The example must define build() -> (model, opt, loss_fn, x, y) and step(model, opt, loss_fn,
x, y), as examples/*.py do. MemTracker raises on a second iteration, so its module stats are
reset before each step: that is what `memtrack record` keeps per iteration. Everything is
built inside the tracker's context, as the agent sees it from `import torch` on.
"""

import argparse
import importlib.util
import json
import sys

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _ModState, _MemRefType

CATEGORIES = [c.value for c in _MemRefType]


def device_name(dev):
    return str(dev) if dev.type != "cuda" or dev.index is not None else "cuda:0"


def snapshot(snap):
    out = {}
    for dev, d in snap.items():
        row = {c: int(d.get(_MemRefType(c), 0)) for c in CATEGORIES}
        row["Total"] = int(d["Total"])
        out[device_name(dev)] = row
    return out


def module_stats(mt):
    mods = []
    for ms in mt.memory_tracking.values():
        mods.append(
            {
                "fqn": ms.mod_fqn,
                "parameter_bytes": ms.parameter_mem,
                "buffer_bytes": ms.buffer_mem,
                "input_bytes": ms.input_mem,
                "output_bytes": getattr(ms, "output_mem", 0),
                "states": [
                    {"state": state.value, "calls": [snapshot(s) for s in snaps]}
                    for state, snaps in ms.snapshots.items()
                ],
            }
        )
    return mods


def main():
    p = argparse.ArgumentParser()
    p.add_argument("example")
    p.add_argument("--steps", type=int, default=3)
    # a program that makes its tracker after its model: MemTracker meets the modules only as
    # they run in the steps (not, say, a parametrization inside register_parametrization)
    p.add_argument("--build-outside", action="store_true")
    args, rest = p.parse_known_args()
    spec = importlib.util.spec_from_file_location("example", args.example)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    kwargs = json.loads(rest[0]) if rest else {}

    mt = MemTracker()
    iterations = []
    if args.build_outside:
        model, opt, loss_fn, x, y = ex.build(**kwargs)
    with mt:
        if not args.build_outside:
            model, opt, loss_fn, x, y = ex.build(**kwargs)
        for i in range(args.steps):
            mt.reset_mod_stats()
            ex.step(model, opt, loss_fn, x, y)
            iterations.append({"iteration": i + 1, "modules": module_stats(mt)})
    json.dump(
        {"iterations": iterations, "peak": snapshot(mt.get_tracker_snapshot("peak"))},
        sys.stdout,
    )


if __name__ == "__main__":
    main()
