"""Module names, as ModTracker._get_mod_name gives them, with the rules of names.py and
docs/record.md: what the agent keeps on each module (ModInfo), top-level modules named by their
class, submodules by their place under it.
"""

import weakref

from .names import Roots, name_id, rename

on_rename = None  # the module tracker's: a running module was renamed (old, new)


class ModInfo:
    """What the agent keeps on a module (in its __dict__): its key and its name."""

    __slots__ = ("obj_id", "wmod", "mk", "name", "name_id", "seen", "root", "fw_inputs")

    def __init__(self, mod, mk, name):
        self.obj_id = id(mod)
        self.wmod = weakref.ref(mod)  # what the backward hooks are given
        self.mk = mk
        self.name = name
        self.name_id = name_id(name)
        self.seen = False
        self.root = True  # no parent has named it
        # per running forward call: the ids and versions of its inputs that require grad
        # (passes_through; the inputs live while the call runs) and a weak reference to
        # the hook on their nodes (on_grads)
        self.fw_inputs = []


_mod_count = [0]
_roots = Roots()  # top-level modules by class name


def _info(mod):
    d = mod.__dict__
    info = d.get("_memtrack_info")
    if info is None or info.obj_id != id(mod):
        _mod_count[0] += 1
        info = d["_memtrack_info"] = ModInfo(mod, _mod_count[0], type(wrapped(mod)).__name__)
    return info


def wrapped(mod):
    """torch.compile(module) returns an OptimizedModule around it: named as what it wraps."""
    if type(mod).__name__ == "OptimizedModule":
        return mod.__dict__.get("_modules", {}).get("_orig_mod") or mod
    return mod


def _set_name(mod, name):
    info = _info(mod)
    if info.name != name:
        info.name = name
        info.name_id = name_id(name)
    return info


def _rename_root(mod, old, new):
    """A top-level module (and its submodules) named `old...` is named `new...` from now on,
    and the collector renames what it recorded under those names."""
    for sub in mod.modules():
        info = sub.__dict__.get("_memtrack_info")
        if info is None or info.obj_id != id(sub):
            continue
        n = info.name
        if n == old or n.startswith(old + "."):
            n2 = new + n[len(old) :]
            rename(n, n2)
            if on_rename is not None:
                on_rename(n, n2)
            info.name = n2


def _name_children(mod, info):
    """Name mod's submodules by their place under it, recursively: also those seen before
    under another name (a parametrization runs inside register_parametrization before it is
    attached: it is named where it is now)."""
    wrapper = wrapped(mod) is not mod
    for cname, sub in mod.named_children():
        # the wrapped module is the same module to the user: MLP.fc1, not MLP._orig_mod.fc1
        name = info.name if wrapper and cname == "_orig_mod" else f"{info.name}.{cname}"
        sinfo = _info(sub)
        sinfo.root = False
        if sinfo.name != name or not sinfo.seen:
            _set_name(sub, name)
            _name_children(sub, sinfo)
    info.seen = True


def mod_info(mod):
    """ModTracker._get_mod_name: an unknown module is named by its class (unless another live
    top-level module has that name: names.Roots); the first time a module is seen, its
    children are named under it."""
    info = _info(mod)
    if not info.seen:
        if info.root:
            name = _roots.claim(mod, info.name, _rename_root)
            if name != info.name:
                _set_name(mod, name)
        _name_children(mod, info)
    return info
