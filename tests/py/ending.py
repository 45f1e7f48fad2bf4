"""Train the example MLP, then end badly, as the recording tests need:

    ending.py kill     two steps, a pause (so the agent ships them), then SIGKILL mid-step
    ending.py raise    one step, then an uncaught RuntimeError("boom at step 1")
    ending.py loop     steps until interrupted (prints "ready" after the first)
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from mlp_batchnorm import build, step  # noqa: E402


def main():
    how = sys.argv[1]
    model, opt, loss_fn, x, y = build(width=64, blocks=2, batch=16)
    if how == "kill":
        for _ in range(2):
            step(model, opt, loss_fn, x, y)
        time.sleep(0.3)
        model(x)  # ops the agent has not shipped yet when the kill comes
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "raise":
        step(model, opt, loss_fn, x, y)
        raise RuntimeError("boom at step 1")
    elif how == "loop":
        i = 0
        while True:
            step(model, opt, loss_fn, x, y)
            if i == 0:
                print("ready", flush=True)
            i += 1
            time.sleep(0.01)


if __name__ == "__main__":
    main()
