"""What other tools answer for the programs of bench/estimate_accuracy.py, one figure a run,
printed as one JSON line ({"bytes": N} or {"error": why}):

    python bench/estimate_peers.py memtracker gpt2|resnet|capture
    python bench/estimate_peers.py accelerate gpt2|resnet|capture

- memtracker: PyTorch's MemTracker (torch.distributed._tools.mem_tracker) around the
  program's training steps with every tensor fake (FakeTensorMode), as torchtitan estimates
  memory, on the "cpu" device (on "cuda" it needs a CUDA device even with fake tensors:
  "hasPrimaryContext"), with reset_mod_stats() between iterations (its per-module table
  otherwise grows with every step); its peak total, MemTracker's own storage accounting
  (no allocator: no reserved figure). The line also says how long it took.
- accelerate: Hugging Face accelerate's `estimate-memory` figure for training with Adam in
  float32 (the largest of model, gradients, optimizer states and step, for a batch of 1), from
  the model built on the meta device; it counts parameters only.

Each model and step is the program's (fixtures/record/gpt2_train.py, resnet_train.py,
scripts/capture_gpu_snapshots.py --steps 12 under its seed).
"""

import importlib.util
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(name, device):
    """(model, optimizer, steps): the program's model made on `device` (the default device
    where None) and its training steps, one callable each."""
    import contextlib

    import torch

    torch.manual_seed(0)
    on = torch.device(device) if device else contextlib.nullcontext()
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192, n_positions=512)
        with on:
            model = GPT2LMHeadModel(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            idx = torch.randint(0, 8192, (8, 256), device=device)
            model(input_ids=idx, labels=idx).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps = [step] * 3

    elif name == "resnet":
        import torchvision

        with on:
            model = torchvision.models.resnet18(num_classes=100)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step():
            x = torch.randn(32, 3, 224, 224, device=device)
            y = torch.randint(0, 100, (32,), device=device)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps = [step] * 3

    elif name == "capture":
        path = os.path.join(ROOT, "scripts", "capture_gpu_snapshots.py")
        spec = importlib.util.spec_from_file_location("capture_gpu_snapshots", path)
        capture = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(capture)
        F = torch.nn.functional
        vocab, max_len = 8192, 1024
        with on:
            model = capture.GPT(vocab, 512, 6, heads=8, max_len=max_len)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        rng = random.Random(0)

        def step(t):
            idx = torch.randint(0, vocab, (8, t), device=device)
            F.cross_entropy(model(idx).view(-1, vocab), idx.view(-1)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps = [lambda t=64 * rng.randint(1, max_len // 64): step(t) for _ in range(12)]

    else:
        raise SystemExit(f"unknown program {name}")
    return model, opt, steps


def memtracker(name):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        model, opt, steps = build(name, "cpu")
        mt = MemTracker()
        mt.track_external(model, opt)
        with mt:
            for step in steps:
                step()
                mt.reset_mod_stats()
        peak = mt.get_tracker_snapshot("peak")
    return max(v.get("Total", 0) for k, v in peak.items() if str(k).startswith("cpu"))


def accelerate(name):
    from accelerate import init_empty_weights
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes

    with init_empty_weights():
        model, _, _ = build(name, None)
    total, _ = calculate_maximum_sizes(model)
    return max(estimate_training_usage(total, "float32").values())


def main():
    tool, name = sys.argv[1], sys.argv[2]
    import time

    start = time.perf_counter()
    try:
        figure = {"memtracker": memtracker, "accelerate": accelerate}[tool](name)
        seconds = round(time.perf_counter() - start, 1)
        print(json.dumps({"bytes": int(figure), "seconds": seconds}))
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}))


if __name__ == "__main__":
    main()
