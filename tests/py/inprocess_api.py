"""The in-process API from an installed wheel (tests/python_package.rs): record the MLP example
in a block, then check the program runs on unobserved, and that capture / snapshot_on_oom warn
on a machine without CUDA. Prints one JSON line of facts for the Rust test to check.

    python tests/py/inprocess_api.py OUT_DIR EXAMPLES_DIR
"""

import json
import os
import sys
import warnings

out_dir, examples = sys.argv[1], sys.argv[2]
sys.path.insert(0, examples)

import memtrack  # noqa: E402
import mlp_batchnorm  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack  # noqa: E402

facts = {"package": os.path.dirname(memtrack.__file__), "binary": memtrack.binary()}

# built before the block: the recording must still name and count them
model, opt, loss_fn, x, y = mlp_batchnorm.build(width=64, blocks=2, batch=16)
path = os.path.join(out_dir, "inproc.pkl")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    patched = (torch.nn.Module, "compile"), (torch.optim.Optimizer, "__init__"), (
        torch.UntypedStorage,
        "resize_",
    )
    before = [getattr(o, n) for o, n in patched], list(warnings.filters), warnings._showwarnmsg
    with memtrack.record(path) as rec:
        for _ in range(3):
            mlp_batchnorm.step(model, opt, loss_fn, x, y)
        facts["modes_inside"] = len(_get_current_dispatch_mode_stack())
        facts["patched_inside"] = [getattr(o, n) for o, n in patched] != before[0]
    after = [getattr(o, n) for o, n in patched], list(warnings.filters), warnings._showwarnmsg
    facts["restored"] = after == before
facts["record_warnings"] = [str(w.message) for w in caught]
facts["ok"] = rec.ok
facts["journal_left"] = [n for n in os.listdir(out_dir) if ".journal-" in n]

# after the block: nothing of the agent left on the program
facts["modes_after"] = len(_get_current_dispatch_mode_stack())
hooks = torch.nn.modules.module
facts["global_hooks_after"] = len(hooks._global_forward_hooks) + len(
    hooks._global_forward_pre_hooks
)
facts["param_hooks_after"] = sum(
    len(p._backward_hooks or {}) + len(getattr(p, "_post_accumulate_grad_hooks", None) or {})
    for p in model.parameters()
)
facts["loss_after"] = mlp_batchnorm.step(model, opt, loss_fn, x, y)

# the Python observer asked for by name: its dispatch mode is on the stack in the block only
path = os.path.join(out_dir, "python_observer.pkl")
with memtrack.record(path, observer="python") as by_mode:
    mlp_batchnorm.step(model, opt, loss_fn, x, y)
    facts["python_modes_inside"] = len(_get_current_dispatch_mode_stack())
facts["python_modes_after"] = len(_get_current_dispatch_mode_stack())
facts["python_ok"] = by_mode.ok


# a decorator, twice, and a block that raises: the exception is the program's, the file written
@memtrack.record(os.path.join(out_dir, "decorated.pkl"))
def one_step():
    return mlp_batchnorm.step(model, opt, loss_fn, x, y)


one_step()
one_step()
try:
    with memtrack.record(os.path.join(out_dir, "raised.pkl")) as raised:
        mlp_batchnorm.step(model, opt, loss_fn, x, y)
        raise KeyError("the program's own")
except KeyError as e:
    facts["raised"] = str(e)
facts["raised_ok"] = raised.ok

html = rec._repr_html_()
facts["html_has_svg"] = "<svg" in html
facts["html_has_table"] = "<pre" in html and "peak" in html.lower()

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with memtrack.capture(os.path.join(out_dir, "snap.pickle"), max_entries=1000) as cap:
        mlp_batchnorm.step(model, opt, loss_fn, x, y)
    oom = memtrack.snapshot_on_oom(os.path.join(out_dir, "oom.pickle"))
facts["cuda"] = torch.cuda.is_available()
facts["capture_ok"] = cap.ok
facts["oom_armed"] = oom.armed
facts["snapshot_warnings"] = [
    (w.category.__name__, str(w.message)) for w in caught
]
print(json.dumps(facts))
