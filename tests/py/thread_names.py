"""Two models made by the main script, each first called in a worker thread through a function
whose parameter is `model`, then in the main thread through another function; beside them, a
thread that runs no op (a logger). memtrack names the models as the program did where it made
them, `embedder` and `classifier`, whatever the thread or the function (tests/record_threads.rs).

Prints `ok` and the output's shape."""

import queue
import threading

import torch
from torch import nn

torch.manual_seed(0)
embedder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
classifier = nn.Sequential(nn.Linear(32, 4))
lines = queue.Queue()


def log():
    while (line := lines.get()) is not None:
        pass


def serve(model, x, out):
    with torch.no_grad():
        out.append(model(x))
    lines.put("served")


def run(model, x):
    return model(x)


logger = threading.Thread(target=log, name="logger")
logger.start()
x = torch.randn(8, 16)
out = []
for model, inputs in ((embedder, lambda: x), (classifier, lambda: out[0])):
    t = threading.Thread(target=serve, args=(model, inputs(), out))
    t.start()
    t.join()
y = run(classifier, run(embedder, x))
y.sum().backward()
lines.put(None)
logger.join()
print("ok", tuple(y.shape))
