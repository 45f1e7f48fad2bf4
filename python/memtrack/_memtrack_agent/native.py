"""The compiled observer (observer.cpp): built with the machine's C++ compiler against the
running torch, once per (observer source, torch, Python) in a cache folder, then loaded as a
C extension. No ninja and no pybind11: one compiler call.

The cache is $MEMTRACK_OBSERVER_CACHE, else ~/.cache/memtrack/observer. Ranks of one job
starting together build once (a lock file); a build that fails is remembered (its log beside
it), so later processes fall back at once instead of compiling again.
"""

import hashlib
import os
import subprocess
import sys
import sysconfig

NAME = "memtrack_observer"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observer.cpp")


def cache_folder():
    return os.environ.get("MEMTRACK_OBSERVER_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "memtrack", "observer"
    )


def _key(torch, source):
    h = hashlib.sha256(source)
    for part in (torch.__version__, sys.version, sys.executable, torch.__file__):
        h.update(b"\0" + str(part).encode())
    return h.hexdigest()[:16]


def _command(torch, out):
    from torch.utils import cpp_extension

    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    cxx = os.environ.get("CXX", "c++")
    cmd = [cxx, "-O2", "-fPIC", "-shared", "-std=c++20", "-w", SOURCE, "-o", out]
    cmd += [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-DTORCH_EXTENSION_NAME={NAME}"]
    cmd += ["-I" + p for p in cpp_extension.include_paths()]
    cmd += ["-I" + sysconfig.get_paths()["include"]]
    for lib in cpp_extension.library_paths():
        cmd += ["-L" + lib, "-Wl,-rpath," + lib]
    cmd += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    return cmd


def load(torch):
    """(module, None), or (None, why) where it cannot be had. Never raises."""
    try:
        with open(SOURCE, "rb") as f:
            source = f.read()
        folder = os.path.join(cache_folder(), _key(torch, source))
        so = os.path.join(folder, NAME + ".so")
        failed = os.path.join(folder, "failed.log")
        if not os.path.exists(so):
            if os.path.exists(failed):
                return None, f"its build failed before (see {failed})"
            os.makedirs(folder, exist_ok=True)
            why = _build(torch, folder, so, failed)
            if why is not None:
                return None, why
        import importlib.util

        spec = importlib.util.spec_from_file_location(NAME, so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def _build(torch, folder, so, failed):
    """Compile under a lock (one build for every process waiting on it); None or why not."""
    import fcntl

    with open(os.path.join(folder, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(so):
            return None  # another process built it while this one waited
        if os.path.exists(failed):
            return f"its build failed (see {failed})"
        sys.stderr.write(
            f"memtrack: building the compiled observer for torch {torch.__version__} "
            f"(once, about 30 s) in {folder}\n"
        )
        tmp = f"{so}.{os.getpid()}.tmp"
        cmd = _command(torch, tmp)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        except OSError as e:
            r = None
            log = f"{' '.join(cmd)}\n{e}\n"
        else:
            log = f"{' '.join(cmd)}\nexit {r.returncode}\n{r.stdout}{r.stderr}"
        if r is None or r.returncode != 0:
            with open(failed, "w") as f:
                f.write(log)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return f"its build failed (see {failed})"
        os.replace(tmp, so)
        return None
