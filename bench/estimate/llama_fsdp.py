# A Llama-style model built from a config (no weights: Llama-3-8B's or Llama-3-70B's shape, or
# "tiny"), bf16, FSDP2 (fully_shard on each decoder layer, then the root) over the world, AdamW,
# N training steps (`--steps N`, 1 by default; the optimizer's states exist from the end of the
# first) on B x 2048 tokens (`--batch B`, 1 by default); `--ac`: Hugging Face's activation
# checkpointing.
#
#   torchrun --nproc-per-node 8 llama_fsdp.py 8b [--ac]        what memtrack estimate runs
#   python llama_fsdp.py 8b --memtracker --world 8 [--ac]      torch's FSDPMemTracker on it, as
#       torchtitan estimates memory: FakeTensorMode and a fake process group, on the "cpu"
#       device (on "cuda" it needs a CUDA device); prints its peak
#
# Prints one JSON line: parameters, this rank's local (sharded) parameters, and with
# --memtracker its peak and seconds.
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging

logging.set_verbosity_error()
size = sys.argv[1]
ac = "--ac" in sys.argv
batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 1
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 1
memtracker = "--memtracker" in sys.argv
SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                num_attention_heads=64, num_key_value_heads=8, vocab_size=128256),
    "tiny": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=1000),
}
cfg = LlamaConfig(**SHAPES[size], max_position_embeddings=8192)
start = time.perf_counter()


def build(device=None, mesh=None):
    """The model in bf16, made on `device` (the meta device, to be materialised later), or
    as plain tensors (None: under FakeTensorMode, fake ones)."""
    torch.set_default_dtype(torch.bfloat16)
    if device is None:
        model = LlamaForCausalLM(cfg)
    else:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    if ac:
        model.gradient_checkpointing_enable()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def step(model, opt, device):
    ids = torch.randint(0, cfg.vocab_size, (batch, 2048), device=device)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()


if memtracker:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world = int(sys.argv[sys.argv.index("--world") + 1])
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    mesh = init_device_mesh("cpu", (world,))  # outside FakeTensorMode: it reads its ranks
    with FakeTensorMode():
        model = build(mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        tracker = FSDPMemTracker(model, opt)
        with tracker:
            step(model, opt, "cpu")
        peak = max(v.get("Total", 0) for v in tracker.get_tracker_snapshot("peak").values())
else:
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = build("meta")
    model.to_empty(device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        step(model, opt, "cuda")
    peak = None
n = sum(p.numel() for p in model.parameters())
local = sum(p.to_local().numel() for p in model.parameters())
if dist.get_rank() == 0:
    print(json.dumps({"parameters": n, "local": local, "peak": peak,
                      "seconds": round(time.perf_counter() - start, 1)}))
