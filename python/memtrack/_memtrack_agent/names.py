"""Names the stream refers to by id (module fqns, optimizer names): each announced once, and
announced again when it changes (the collector renames it everywhere).

Top-level modules and optimizers are named after their class, as ModTracker does, while they
are the only live one of it. When a second live one appears (a GAN's generator and
discriminator, both `Sequential`, each with its `Adam`), both are named by the program:
the variable or attribute that holds each (`gen`, `disc`, a LightningModule's `generator`) in
the outermost of the program's scopes that holds it (where it was made, whichever thread uses
it), or else the class name with a suffix in order of first use (`Sequential#2`). This runs
once per such object, never per op.
"""

import os
import sys
import types
import weakref

from . import transport
from .protocol import MSG_NAME

_names = {}  # name -> id


def name_id(name):
    i = _names.get(name)
    if i is None:
        i = _names[name] = len(_names)
        transport.write_json({"t": MSG_NAME, "id": i, "name": name})
    return i


def rename(old, new):
    """Give the id named `old` the name `new`: the collector renames what it recorded under it
    (ops and module tables) too. The id."""
    i = _names.pop(old, None)
    if i is None:
        return name_id(new)
    _names[new] = i
    transport.write_json({"t": MSG_NAME, "id": i, "name": new})
    return i


# ---- the program's own names for objects


def _library_dirs():
    """Folders whose frames are not the program's: this agent, torch, Lightning, and Python's
    own library (threading's frames hold a thread's target and arguments)."""
    import sysconfig

    dirs = [os.path.dirname(os.path.abspath(__file__))]
    for lib in ("torch", "lightning", "pytorch_lightning", "lightning_fabric"):
        m = sys.modules.get(lib)
        f = getattr(m, "__file__", None)
        if f:
            dirs.append(os.path.dirname(os.path.abspath(f)))
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        dirs.append(os.path.abspath(stdlib))
    return tuple(d + os.sep for d in dirs)


def _attributes(v):
    """An object's attributes and, for a module, its children, without running its code
    (no __getattr__, no properties)."""
    try:
        d = object.__getattribute__(v, "__dict__")
    except Exception:
        return ()
    if type(d) is not dict:
        return ()
    items = list(d.items())
    subs = d.get("_modules")
    if type(subs) is dict:
        items.extend(subs.items())
    return items


def _program_scopes():
    """The program's variables where it could have named an object, outermost first: the main
    script's globals, the main thread's frames, then this thread's (a worker thread's own
    frames hold what it was given, under its parameters' names). Frames of libraries (this
    agent, torch, Python's own) are not the program's."""
    libs = _library_dirs()
    scopes = []
    main = sys.modules.get("__main__")
    if main is not None:
        scopes.append(vars(main))
    import threading

    stacks = []
    main_ident = threading.main_thread().ident
    if main_ident != threading.get_ident():
        stacks.append(sys._current_frames().get(main_ident))
    stacks.append(sys._getframe(1))
    for f in stacks:
        frames = []
        while f is not None:
            path = f.f_code.co_filename
            if not (path.startswith(libs) or path.startswith("<")):
                frames.append(f)
            f = f.f_back
        for f in reversed(frames):
            try:
                scopes.append(f.f_locals)
            except Exception:
                pass
    return scopes


def program_names(targets):
    """{id(obj): name} for the objects in `targets` that the program holds: the name it gave
    each where it was made, the outermost of its scopes (a model passed to a function keeps
    its caller's name, whichever thread calls it): a variable (`gen`), else an attribute of one
    (`self.generator` gives `generator`; a private one, as a wrapper's `_optimizer`, gives the
    variable's name)."""
    found = {}
    want = {id(t): t for t in targets}
    for scope in _program_scopes():
        if len(found) == len(want):
            break
        try:
            local = list(scope.items())
        except Exception:
            continue
        for k, v in local:
            i = id(v)
            if i in want and i not in found and k != "self" and want[i] is v:
                found[i] = k
        for k, v in local:
            if isinstance(v, types.ModuleType):
                continue
            for a, w in _attributes(v):
                i = id(w)
                if i in want and i not in found and want[i] is w and isinstance(a, str):
                    found[i] = k if a.startswith("_") and k != "self" else a
    return found


class Roots:
    """The live objects named after each class (top-level modules, optimizers), in order of
    first use; `claim` names a new one."""

    def __init__(self):
        self.live = {}  # class name -> [(weakref, current name)]

    def claim(self, obj, base, rename_holder):
        """The name for `obj`, first used now, whose class name is `base`. When other live
        objects have that class, every one still named `base` is renamed by the program
        (rename_holder(holder, old, new)) and `obj` gets its program name or `base#n`."""
        entries = [e for e in self.live.get(base, ()) if e[0]() is not None and e[0]() is not obj]
        if not entries:
            self.live[base] = [[weakref.ref(obj), base]]
            return base
        holders = [e for e in entries if e[1] == base]
        found = program_names([obj] + [e[0]() for e in holders])
        taken = {e[1] for e in entries}
        for e in holders:
            new = found.get(id(e[0]()))
            if new and new not in taken and new != base:
                rename_holder(e[0](), base, new)
                taken.discard(base)
                taken.add(new)
                e[1] = new
        name = found.get(id(obj))
        if not name or name in taken or name == base:
            n = len(entries) + 1
            name = f"{base}#{n}"
            while name in taken:
                n += 1
                name = f"{base}#{n}"
        entries.append([weakref.ref(obj), name])
        self.live[base] = entries
        return name
