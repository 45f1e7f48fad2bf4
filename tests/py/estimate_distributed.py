# `memtrack estimate`'s distributed program, run under torchrun; argv[1] says what it does:
#   fsdp      FSDP2 (fully_shard on each block, then the root) over the world, AdamW, two
#             steps; its layers' first dimensions (100, 36) do not divide by 8, so FSDP2 pads
#   offload   the same with CPUOffloadPolicy, initialised on the meta device, to_empty("cpu")
#   ddp       DDP of the model, AdamW, two steps; "single" the same without DDP or torchrun
#   tp2d      a 2-D mesh (data parallel x 4-way tensor parallel): Colwise/Rowwise on each
#             block, then FSDP2 over the data-parallel dimension
#   badmesh   a mesh of 3 x 4 ranks in a world of 8
#   spawn     without torchrun: mp.spawn's workers, one a device, each run "ddp" as the rank it
#             names in init_process_group; "spawnfail" the same, where rank 1 raises
# Prints the parameters' local elements and "done".
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

what = sys.argv[1]
DIMS = (96, 100, 36)  # each block: Linear(96, 100), Linear(100, 36), Linear(36, 96)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        a, b, c = DIMS
        self.up = nn.Linear(a, b)
        self.mid = nn.Linear(b, c)
        self.down = nn.Linear(c, a)

    def forward(self, x):
        return x + self.down(torch.relu(self.mid(torch.relu(self.up(x)))))


def model():
    return nn.Sequential(*[Block() for _ in range(3)])


def steps(net, opt):
    for _ in range(2):
        x = torch.randn(16, 64, DIMS[0], device="cuda")
        net(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def main(what, local_rank, init):
    if what != "single":
        init()
        torch.cuda.set_device(local_rank)
    if what in ("fsdp", "offload"):
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        kw = {"offload_policy": CPUOffloadPolicy()} if what == "offload" else {}
        if what == "offload":
            with torch.device("meta"):
                net = model()
        else:
            net = model().cuda()
        for blk in net:
            fully_shard(blk, **kw)
        fully_shard(net, **kw)
        if what == "offload":
            net.to_empty(device="cpu")
    elif what == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model().cuda(), device_ids=[local_rank])
    elif what == "single":
        net = model().cuda()
    elif what in ("tp2d", "badmesh"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        world = dist.get_world_size()
        shape = (3, 4) if what == "badmesh" else (world // 4, 4)
        mesh = init_device_mesh("cuda", shape, mesh_dim_names=("dp", "tp"))
        net = model().cuda()
        for blk in net:
            parallelize_module(blk, mesh["tp"], {"up": ColwiseParallel(), "mid": RowwiseParallel()})
            fully_shard(blk, mesh=mesh["dp"])
        fully_shard(net, mesh=mesh["dp"])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    steps(net, opt)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in net.parameters())
    print("local parameters", local, "done")


def spawned(rank, world):
    init = lambda: dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=rank,
                                           world_size=world)
    init()
    if what == "spawnfail" and rank == 1:
        raise ValueError("rank 1 fails")
    main("ddp", rank, lambda: None)


if __name__ == "__main__":
    if what in ("spawn", "spawnfail"):
        n = torch.cuda.device_count()  # (the DDP tutorial's form)
        torch.multiprocessing.spawn(spawned, args=(n,), nprocs=n)
    else:
        main(what, int(os.environ.get("LOCAL_RANK", "0")), lambda: dist.init_process_group("nccl"))
