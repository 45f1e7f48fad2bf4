# A warning raised inside a C++ op (TORCH_WARN: resizing a non-empty out= tensor) as a program
# sees it: where it points, whether a filter on the program's module turns it into an error,
# and once-per-location deduplication. Prints one line per fact; the same lines alone and
# under `memtrack record` (tests/record_never_raises.rs).
import contextlib
import io
import os
import warnings

import torch

a = torch.ones(3)


def locations():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.add(a, a, out=torch.empty(5))
    return [(os.path.basename(x.filename), x.lineno, x.category.__name__) for x in w]


print("location", locations())

warnings.filterwarnings("error", module="__main__")
try:
    torch.add(a, a, out=torch.empty(5))
    print("error filter on __main__: not raised")
except UserWarning as e:
    print("error filter on __main__: raised", str(e).split(" since")[0])

warnings.resetwarnings()
warnings.simplefilter("default")
err = io.StringIO()
with contextlib.redirect_stderr(err):
    for _ in range(3):
        torch.add(a, a, out=torch.empty(5))  # one line three times: shown once
    torch.add(a, a, out=torch.empty(5))  # another line: shown again
shown = [line.split(": UserWarning")[0] for line in err.getvalue().splitlines() if "UserWarning" in line]
print("default action, shown at", [(os.path.basename(s.rsplit(":", 1)[0]), int(s.rsplit(":", 1)[1])) for s in shown])
