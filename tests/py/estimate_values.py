# `memtrack estimate`'s program for values a device tensor does not have, and the device's own
# questions; argv[1] says what it does:
#   device     torch.cuda's memory questions (mem_get_info, the peaks, a reset), print(loss),
#              a module made on the CPU moved with .to(y.device)
#   raise      a linear layer, then an error raised by the program (it does not finish)
#   select     nonzero, masked_select, boolean-mask indexing, torch.where(cond), unique;
#              then a convolution
#   exit       five item() reads, then os._exit(0)
#   term       five item() reads, then SIGTERM to itself
#   earlystop  training that stops when loss.item() < 0.5, doubling the batch until then
#   save       torch.save of a state dict over argv[2], a JSON log of the loss
#   known      reads of values that came from the host (they are known)
#   loop       a loop waiting on a value the estimate does not have
import json
import os
import signal
import sys

import torch

what = sys.argv[1]
if what == "device":
    x = torch.randn(1024, 1024, 64, device="cuda")  # 256 MiB
    del x
    y = torch.randn(1024, 1024, device="cuda")  # 4 MiB, from the 256 MiB block cached
    free, total = torch.cuda.mem_get_info()
    print("mem_get_info", free, total)
    print("before reset", torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
    torch.cuda.reset_peak_memory_stats()
    print("after reset", torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
    loss = y.sum()  # a small block: the small pool's first 2 MiB segment
    print(loss)
    print("peaks", torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
    host = torch.nn.Linear(1024, 1024)  # made on the CPU, moved to a device tensor's device
    before = torch.cuda.memory_allocated()
    host.to(y.device)
    print("moved to y.device", torch.cuda.memory_allocated() - before)
elif what == "raise":
    m = torch.nn.Linear(100, 100).cuda()
    y = m(torch.randn(8, 100, device="cuda"))
    raise ValueError("the program's own error")
elif what == "select":
    x = torch.randn(1000, 64, device="cuda")
    a = x[x[:, 0] > 0]
    b = torch.masked_select(x, x > 0)
    c = torch.nonzero(x)
    (d,) = torch.where(x[:, 0] > 0)
    e = torch.unique(x)
    print([tuple(t.shape) for t in (a, b, c, d, e)])
    torch.nn.functional.conv2d(torch.randn(1, 3, 8, 8, device="cuda"), torch.randn(4, 3, 3, 3, device="cuda"))
elif what in ("exit", "term"):
    x = torch.randn(10, device="cuda")
    for _ in range(5):
        x.sum().item()
    sys.stdout.flush()
    if what == "exit":
        os._exit(0)
    os.kill(os.getpid(), signal.SIGTERM)
elif what == "earlystop":
    m = torch.nn.Linear(256, 256).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    batch = 64
    while True:
        loss = m(torch.randn(batch, 256, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if loss.item() < 0.5:
            break
        batch *= 2
    print("stopped at batch", batch)
elif what == "save":
    m = torch.nn.Linear(10, 10).cuda()
    loss = m(torch.randn(3, 10, device="cuda")).sum()
    torch.save(m.state_dict(), sys.argv[2])
    print("saved")
elif what == "known":
    ids = torch.tensor([[5, 6, 7, 0]]).cuda()
    mask = (ids != 0).long()
    print("all", bool(mask.all()), "sum", int(mask.sum()), "list", ids.tolist())
    print("arange", torch.arange(4, device="cuda").tolist())
elif what == "loop":
    done = torch.zeros((), dtype=torch.bool, device="cuda")
    steps = 0
    while not done:
        done = torch.randn((), device="cuda") > 3
        steps += 1
    print("never printed", steps)
