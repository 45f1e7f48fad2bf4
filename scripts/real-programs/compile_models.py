"""torch.compile (Inductor, CPU) of real models: torchvision ResNet-18 (SGD momentum) or
Hugging Face GPT-2 from a small config (AdamW). Prints losses and dynamo's counters, so a
run under `memtrack record` can be compared with a plain one."""
import argparse
import sys
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("model", choices=["resnet18", "gpt2"])
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--how", choices=["function", "method"], default="function")
ap.add_argument("--bf16", action="store_true", help="CPU autocast to bfloat16")
args = ap.parse_args()

torch.manual_seed(0)
if args.model == "resnet18":
    import torchvision

    model = torchvision.models.resnet18(weights=None, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(4, 3, 64, 64)
    y = torch.randint(0, 10, (4,))

    def loss_of(run):
        return torch.nn.functional.cross_entropy(run(x), y)
else:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, cfg.vocab_size, (2, 32))

    def loss_of(run):
        return run(input_ids=ids, labels=ids).loss

model.train()
print(f"param_bytes={sum(p.numel() * p.element_size() for p in model.parameters())}")
if args.how == "function":
    run = torch.compile(model)
else:
    model.compile()
    run = model
for step in range(args.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        loss = loss_of(run)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
    print(f"step {step} seconds {time.perf_counter() - t0:.4f}", file=sys.stderr)
from torch._dynamo.utils import counters

print("frames", dict(counters["frames"]), "graph_breaks", sum(counters["graph_break"].values()),
      "recompiles", dict(counters["recompiles"]) if "recompiles" in counters else {})
