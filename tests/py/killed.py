"""Train the example MLP and die of SIGKILL, for the lossless-recording tests:

    killed.py PROGRESS after N      N steps and one more forward, then SIGKILL right away
    killed.py PROGRESS after N exit the same ops, then a normal exit (the reference)
    killed.py PROGRESS timer MS     steps until a timer thread SIGKILLs the process MS ms
                                    after the model is built
    killed.py PROGRESS steps N      N steps, normal exit (the reference for the timer)

PROGRESS gets a line per finished step, written straight to the file (it survives the kill).
"""

import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from mlp_batchnorm import build, step  # noqa: E402


def main():
    progress = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    how, n = sys.argv[2], int(sys.argv[3])
    model, opt, loss_fn, x, y = build(width=64, blocks=2, batch=16)
    os.write(progress, b"built\n")
    kill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    if how == "after":
        for _ in range(n):
            step(model, opt, loss_fn, x, y)
        model(x)
        if sys.argv[4:] != ["exit"]:
            kill()
    elif how == "timer":
        threading.Timer(n / 1000, kill).start()
        i = 0
        while True:
            step(model, opt, loss_fn, x, y)
            i += 1
            os.write(progress, b"step %d\n" % i)
    elif how == "steps":
        for i in range(n):
            step(model, opt, loss_fn, x, y)
            os.write(progress, b"step %d\n" % (i + 1))


if __name__ == "__main__":
    main()
