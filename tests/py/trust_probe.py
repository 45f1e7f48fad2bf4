"""A program recorded on a shared machine, for tests/record_trust.rs: it trains a little,
prints one JSON line saying where memtrack put its agent, socket and journal (as the
environment tells the program), waits for a line on stdin (the test plays the other user
meanwhile), then trains on and prints "done".

    trust_probe.py [STEPS_AFTER] [small-segments] [first]

small-segments: the agent's spool segments made small (its own constants) and the current
one ended, so that steps after the pause need new segment files, as a long run does.
first: the pause comes first, before torch is imported (the agent has not started).
"""

import json
import os
import sys


def pause():
    print(
        json.dumps(
            {
                "agent": os.environ["PYTHONPATH"].split(os.pathsep)[0],
                "socket": os.environ["MEMTRACK_SOCKET"],
                "journal": os.environ["MEMTRACK_SPOOL"],
            }
        ),
        flush=True,
    )
    sys.stdin.readline()


if "first" in sys.argv:
    pause()

import torch  # noqa: E402

steps_after = int(sys.argv[1]) if len(sys.argv) > 1 else 3
if "small-segments" in sys.argv:
    transport = sys.modules["_memtrack_agent"].transport
    transport.SPOOL_SLOTS = 1 << 12
    transport.RESERVE_SLOTS = 1 << 10
    # the segment open now ends here: the next record needs a fresh one
    transport._spool_state["slots"] = transport._spool[1] = transport._spool[0]

model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)


def step():
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


step()
if "first" not in sys.argv:
    pause()
for _ in range(steps_after):
    step()
print("done", flush=True)
