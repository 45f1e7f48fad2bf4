"""The compiled observer (observer.cpp): built with the machine's C++ compiler against the
running torch, once per (observer source, torch, Python) in a cache folder, then loaded as a
C extension. No ninja and no pybind11: one compiler call.

The cache is $MEMTRACK_OBSERVER_CACHE, else ~/.cache/memtrack/observer. Ranks of one job
starting together build once (a lock file); a build that fails is remembered (its log beside
it), so later processes fall back at once instead of compiling again.

Whoever may change the library runs code in the program, so folders made here are 0700
whatever the umask, and a library is loaded only from a path that no other user may change:
each folder from the root down and the file itself belong to this user or root and are
writable by nobody else (a sticky folder such as /tmp excepted, as ssh's StrictModes has it).
"""

import hashlib
import os
import subprocess
import sys
import sysconfig

NAME = "memtrack_observer"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observer.cpp")
# what SOURCE includes from beside it: part of the build's key
HEADERS = [os.path.join(os.path.dirname(SOURCE), "fast_path.h")]


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
        source = b""
        for path in [SOURCE] + HEADERS:
            with open(path, "rb") as f:
                source += f.read() + b"\0"
        folder = os.path.join(cache_folder(), _key(torch, source))
        so = os.path.join(folder, NAME + ".so")
        failed = os.path.join(folder, "failed.log")
        if not os.path.exists(so):
            if os.path.exists(failed):
                return None, f"its build failed before (see {failed})"
            _private_makedirs(folder)
            # nothing is built where another user could swap the library before it loads
            why = _unsafe(folder) or _build(torch, folder, so, failed)
            if why is not None:
                return None, why
        why = _unsafe(so)
        if why is not None:
            return None, why
        import importlib.util

        spec = importlib.util.spec_from_file_location(NAME, so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        # a single-phase C extension puts itself in sys.modules; the agent holds it, and the
        # program's modules stay as they were (an attach's detach leaves none behind)
        if sys.modules.get(NAME) is mod:
            del sys.modules[NAME]
        return mod, None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def _private_makedirs(folder):
    """`os.makedirs`, each folder it makes 0700 whatever the umask."""
    folder = os.path.abspath(folder)
    parent = os.path.dirname(folder)
    if parent != folder and not os.path.isdir(parent):
        _private_makedirs(parent)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        return
    os.chmod(folder, 0o700)


def _unsafe(path):
    """Why `path` may have been changed by another user, or None: every folder above it, on
    its way as written and as links resolve, is checked."""
    import stat

    me = os.geteuid()
    for at in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        while True:
            s = os.lstat(at)
            mode = s.st_mode
            open_to_others = mode & 0o022 and not stat.S_ISLNK(mode)
            if stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
                open_to_others = False  # /tmp: nobody may rename what another user owns
            if s.st_uid not in (me, 0) or open_to_others:
                return (
                    f"not loaded: {at} may be changed by another user (owner id {s.st_uid}, "
                    f"mode {stat.S_IMODE(mode):o}); make it yours and not group- or "
                    "world-writable"
                )
            parent = os.path.dirname(at)
            if parent == at:
                break
            at = parent
    return None


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
