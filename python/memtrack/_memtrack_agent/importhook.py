"""Running code right after a module is imported (torch, torch._inductor.output_code)."""

import sys


class AfterImport:
    """One-shot meta path finder: lets the normal machinery find module `name`, then calls
    `then(module)` right after the module's code has run."""

    def __init__(self, name, then):
        self.name = name
        self.then = then

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        orig = loader.exec_module
        then = self.then

        def exec_module(module):
            orig(module)
            try:
                then(module)
            except Exception as e:  # never break the user's program
                sys.stderr.write(f"memtrack: after importing {name}: {e!r}\n")

        loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        pass


def after_import(name, then):
    """Call then(module) now if `name` is imported, else right after it is; returns the
    finder waiting for it (None if it ran now)."""
    if name in sys.modules:
        then(sys.modules[name])
        return None
    finder = AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    return finder
