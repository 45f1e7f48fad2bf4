"""`memtrack estimate`: the program's checkpoints are never written. A device tensor holds no
values here, so `torch.save`, safetensors' `save_file` / `save_model` (what Hugging Face's
`save_pretrained` calls) and torch.distributed.checkpoint's `save` / `async_save` would
write files of nothing over the user's real ones: they write nothing, and an `unwritten`
message names the file and the program's line. Saving into memory (an `io.BytesIO`) goes on
as usual.
"""

import io
import os
import sys

from . import fake_values, transport
from .importhook import after_import
from .protocol import MSG_ESTIMATE_UNWRITTEN

_done = set()


def unwritten(what, target):
    if isinstance(target, (str, bytes, os.PathLike)):
        path = os.fsdecode(target)
    else:
        path = str(getattr(target, "name", None) or repr(target))
    where = fake_values.site()
    transport.message(
        {"t": MSG_ESTIMATE_UNWRITTEN, "file": where[0], "line": where[1], "what": what, "path": path}
    )


def _in_memory(target):
    return isinstance(target, (io.BytesIO, io.StringIO))


def _guard_torch_save(torch):
    save = torch.save

    def guarded_save(obj, f, *args, **kwargs):
        if _in_memory(f):
            return save(obj, f, *args, **kwargs)
        unwritten("torch.save", f)
        return None

    guarded_save.__wrapped__ = save
    guarded_save.__doc__ = save.__doc__
    torch.save = guarded_save
    serialization = getattr(torch, "serialization", None)
    if serialization is not None and getattr(serialization, "save", None) is save:
        serialization.save = guarded_save


def _guard(fn, what, target_of, returns=None):
    """`fn` (a function writing the file `target_of(args, kwargs)` names) made to write
    nothing, returning `returns()` if given. A plain function is changed itself, so that
    every name it was imported under (`from safetensors.torch import save_file as
    safe_save_file`) gets the guard; a decorated one (a closure) is replaced by a new
    function, which the caller sets on its module."""
    if getattr(fn, "__memtrack_guarded__", False):
        return fn

    def guarded(*args, **kwargs):
        unwritten(what, target_of(args, kwargs))
        return returns() if returns is not None else None

    if fn.__closure__:
        # a decorated function: its wrapper's code cannot be swapped; callers through the
        # module get the guard (owner.name = guarded, by the caller)
        guarded.__memtrack_guarded__ = True
        return guarded
    name = f"_memtrack_guard_{fn.__name__}"
    fn.__globals__[name] = guarded
    stub = {}
    exec(f"def {fn.__name__}(*args, **kwargs):\n    return {name}(*args, **kwargs)\n", fn.__globals__, stub)
    fn.__code__ = stub[fn.__name__].__code__
    fn.__defaults__ = None
    fn.__kwdefaults__ = None
    fn.__memtrack_guarded__ = True
    return fn


def _second(args, kwargs):
    return args[1] if len(args) > 1 else kwargs.get("filename")


def _checkpoint_dir(args, kwargs):
    writer = kwargs.get("storage_writer") or (args[1] if len(args) > 1 else None)
    return kwargs.get("checkpoint_id") or getattr(writer, "path", None) or "the checkpoint"


def _guard_dcp(module):
    """torch.distributed.checkpoint (what FSDP2 and torchtitan checkpoint with) writes each
    rank's shards, opening the files before it reads the tensors: nothing is written."""
    import concurrent.futures

    def done():
        # async_save returns the upload's future, or (staging that returns a future) an
        # AsyncSaveResponse of two: this one answers both ways
        f = concurrent.futures.Future()
        f.set_result(None)
        f.staging_completion = f.upload_completion = f
        return f

    saver = sys.modules.get("torch.distributed.checkpoint.state_dict_saver")
    for owner in (module, saver):
        for name, returns in (("save", None), ("save_state_dict", None), ("async_save", done)):
            fn = getattr(owner, name, None) if owner is not None else None
            if fn is not None:
                try:
                    what = f"torch.distributed.checkpoint.{name}"
                    setattr(owner, name, _guard(fn, what, _checkpoint_dir, returns))
                except Exception as e:
                    transport.internal_error(e)


def _guard_safetensors(module):
    """safetensors.torch: save_file(tensors, filename) and save_model(model, filename). A
    module torch's import found half made (it imports torch first) is guarded at the next
    import once its functions exist."""
    ready = all(hasattr(module, n) for n in ("save_file", "save_model"))
    if not ready:
        _retry_later(module)
        return
    try:
        module.save_file = _guard(module.save_file, "safetensors save_file", _second)
        module.save_model = _guard(module.save_model, "safetensors save_model", _second)
        _done.add(module.__name__)
    except Exception as e:
        transport.internal_error(e)


class _Retry:
    """A meta path finder that finds nothing and, at each import, guards what was not ready."""

    def __init__(self, module):
        self.module = module

    def find_spec(self, name, path=None, target=None):
        if self.module.__name__ in _done:
            self._leave()
        elif hasattr(self.module, "save_model"):
            self._leave()
            _guard_safetensors(self.module)
        return None

    def _leave(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def invalidate_caches(self):
        pass


def _retry_later(module):
    sys.meta_path.insert(0, _Retry(module))


def install(torch):
    _guard_torch_save(torch)
    after_import("safetensors.torch", _guard_safetensors)
    after_import("torch.distributed.checkpoint", _guard_dcp)
