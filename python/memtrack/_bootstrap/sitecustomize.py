# memtrack's bootstrap, written by `memtrack record` into a private folder that is put first on
# PYTHONPATH. It arms a one-shot import hook that starts the recording agent as soon as the
# program imports torch, then runs the sitecustomize the user already had (if any), so nothing
# the environment relied on is lost. Nothing here imports torch or costs anything at start-up.
import os as _os
import sys as _sys


def _memtrack_bootstrap():
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.environ.get("MEMTRACK_SOCKET") and "_memtrack_agent" not in _sys.modules:
        _sys.path.insert(0, here)
        try:
            import _memtrack_agent

            _memtrack_agent.install()
        except Exception as e:  # never break the user's program
            _sys.stderr.write(f"memtrack: agent not installed: {e!r}\n")
        finally:
            try:
                _sys.path.remove(here)
            except ValueError:
                pass
    # Chain to the next sitecustomize on the path (ours shadows it).
    import importlib.machinery
    import importlib.util

    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        if spec.origin and _os.path.dirname(_os.path.abspath(spec.origin)) == here:
            return
        mod = importlib.util.module_from_spec(spec)
        _sys.modules["sitecustomize"] = mod
        spec.loader.exec_module(mod)


_memtrack_bootstrap()
del _memtrack_bootstrap
