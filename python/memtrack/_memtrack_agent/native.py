"""The compiled observer (observer.cpp): built with the machine's C++ compiler against the
running torch, once per (observer source, torch, Python) in a cache folder, loaded as a C
extension, and started in place of the dispatch mode (observe). No ninja and no pybind11: one
compiler call.

The cache is $MEMTRACK_OBSERVER_CACHE, else ~/.cache/memtrack/observer. Ranks of one job
starting together build once (a lock file); a build that fails is remembered (its log beside
it), so later processes fall back at once instead of compiling again.

Whoever may change the library runs code in the program, so folders made here are 0700 and
files 0600 (the library 0700) whatever the umask (_repair mends a cache an older memtrack left
open), and a library is loaded only from a path that no other user may change:
each folder from the root down and the file itself belong to this user or root and are
writable by nobody else (a sticky folder such as /tmp excepted, as ssh's StrictModes has it).
"""

import functools
import hashlib
import os
import subprocess
import sys
import sysconfig

from . import modules, ops, state, transport

NAME = "memtrack_observer"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observer.cpp")
# what SOURCE includes from beside it: part of the build's key
HEADERS = [os.path.join(os.path.dirname(SOURCE), h) for h in ("fast_path.h", "module_path.h")]


# set by load(): the library loaded, and the seconds its build took in this process (None:
# built before)
loaded_from = None
built_in_seconds = None


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
    global loaded_from
    try:
        source = b""
        for path in [SOURCE] + HEADERS:
            with open(path, "rb") as f:
                source += f.read() + b"\0"
        folder = os.path.join(cache_folder(), _key(torch, source))
        so = os.path.join(folder, NAME + ".so")
        failed = os.path.join(folder, "failed.log")
        try:
            _repair(cache_folder())
        except OSError:
            pass  # another process repairs it now, or cannot: _unsafe says below
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
        loaded_from = so
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


def _repair(cache):
    """A cache of this user's with files open to others (an earlier memtrack built them under
    umask 000: the library 0777, the lock 0666) is made private again, where that is safe: in a
    build folder that is this user's, 0700 and on a safe path, no other user could open the
    files whatever their modes, so they are made 0700 / 0600; in one others could reach, they
    may have been changed, so they are removed (the library is built again)."""
    import stat

    try:
        folders = [os.path.join(cache, k) for k in os.listdir(cache)]
    except OSError:
        return
    me = os.geteuid()
    for folder in folders:
        s = os.lstat(folder)
        if not stat.S_ISDIR(s.st_mode) or s.st_uid != me:
            continue
        private = None
        for f in os.listdir(folder):
            f = os.path.join(folder, f)
            fs = os.lstat(f)
            if not stat.S_ISREG(fs.st_mode) or fs.st_uid != me or not fs.st_mode & 0o077:
                continue
            if private is None:
                private = stat.S_IMODE(s.st_mode) & 0o077 == 0 and _unsafe(folder) is None
            if private:
                os.chmod(f, 0o700 if f.endswith(".so") else 0o600)
            else:
                os.unlink(f)
        if stat.S_IMODE(s.st_mode) & 0o077 and _unsafe(cache) is None:
            os.chmod(folder, 0o700)


def _private_file(path):
    """Open `path` for writing, created 0600 whatever the umask, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w")


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
    global built_in_seconds
    import fcntl

    with _private_file(os.path.join(folder, "lock")) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(so):
            return None  # another process built it while this one waited
        if os.path.exists(failed):
            return f"its build failed (see {failed})"
        sys.stderr.write(
            f"memtrack: building the compiled observer for torch {torch.__version__} in "
            f"{folder} (once: about 20 s of compiler time; 30 s on an idle machine, minutes "
            "on a busy one)\n"
        )
        tmp = f"{so}.{os.getpid()}.tmp"
        cmd = _command(torch, tmp)
        try:
            code, output, seconds = _compile(cmd)
        except OSError as e:
            code = None
            log = f"{' '.join(cmd)}\n{e}\n"
        else:
            log = f"{' '.join(cmd)}\nexit {code}\n{output}"
            sys.stderr.write(
                f"memtrack: the compiled observer's build {'took' if code == 0 else 'failed after'}"
                f" {seconds:.0f} s\n"
            )
        if code != 0:
            with _private_file(failed) as f:
                f.truncate()
                f.write(log)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return f"its build failed (see {failed})"
        os.chmod(tmp, 0o700)  # the linker's file is 0777 less the umask
        os.replace(tmp, so)
        built_in_seconds = seconds
        return None


def _compile(cmd):
    """Run the compiler, saying every 15 s that it still runs (one call, no output of its own
    until it ends): (exit code, its output, seconds)."""
    import time

    started = time.monotonic()
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    while True:
        try:
            output, _ = p.communicate(timeout=15)
            break
        except subprocess.TimeoutExpired:  # retrying loses no output
            sys.stderr.write(
                f"memtrack: still building the compiled observer "
                f"({time.monotonic() - started:.0f} s)\n"
            )
    return p.returncode, output, time.monotonic() - started


def observe(torch, ext):
    """Observe ops with the compiled observer `ext` (load()) instead of the dispatch mode
    (ops.install() first); None, or why it cannot (the caller enters the mode instead)."""
    ops._Storage = torch.UntypedStorage
    ops._native = ext
    if ops._skip_code is not None:
        hot = (ops.observed, ops._native_code, ops._new_dense, ops._other_observed)
        for f in hot + (ops._device_index,):
            ops._skip_code(f.__code__)
    # on the CPU the observer does ops.observed()'s work itself for an op whose outputs are
    # plain dense tensors, with ops' table and the spool, and reports deaths in C (ext.death)
    fast = None
    if not ops._cuda:
        fast = (vars(ops), transport._spool, transport._unlocked, transport.internal_error)
    previous = ops._death_callback
    if fast is not None:
        ops._death_callback = ext.death
    else:
        ops._death_callback = functools.partial(functools.partial, ext.guarded, ops._on_del)
    try:
        ext.install(ops.observed, fast)
    except Exception as e:
        ops._native, ops._death_callback = None, previous
        return f"{type(e).__name__}: {e}"
    if fast is not None:
        try:
            modules.bind_native(torch, ext)
        except Exception as e:  # the module tracker stays in Python, as it would on CUDA
            transport.internal_error(e)
    _sample_record_functions(torch)
    from .importhook import after_import

    waiting = after_import("torch._dynamo.callback", _pause_while_compiling)
    if waiting is not None:
        state.undo.append(lambda: waiting in sys.meta_path and sys.meta_path.remove(waiting))
    return None


def paths():
    """Which path the agent's work has taken so far in this process: the observer, whether the
    compiled one accounts ops in C (the CPU fast path) and does module calls in C (the module
    path), whether the writers lock (a second thread recorded), where the observer was loaded
    from and whether it was built here, and its counts (observer.cpp's counts()).
    bench/record_overhead.py and the tests read it from the program, through
    sys.modules["_memtrack_agent"] (docs/record.md, Overhead)."""
    ext = ops._native
    return {
        "observer": "python" if ext is None else "compiled",
        "fast_path": ext is not None and not ops._cuda,
        "module_path": modules._native_pre is not None,
        "threaded": transport.threaded,
        "loaded_from": loaded_from,
        "built_in_seconds": built_in_seconds,
        **(ext.counts() if ext is not None else {}),
    }


def _pause_while_compiling(callback):
    """torch.compile's tracing runs real and fake ops that are not the program's; a dispatch
    mode is switched off for them (ignore_compile_internals), the compiled observer is paused
    between dynamo's compile start and end callbacks (a torch without them: docs/record.md,
    Observers). Called when torch._dynamo.callback is imported."""
    handler = getattr(callback, "callback_handler", None)
    if handler is None or ops._native is None:
        return
    ext = ops._native

    # torch 2.3 calls them with no argument, later torches with a CallbackArgs; whatever
    # happens, nothing raises into dynamo (it would end the program's compile)
    def start(*args):
        try:
            ext.pause()
        except Exception as e:
            transport.internal_error(e)

    def end(*args):
        try:
            ext.resume()
        except Exception as e:
            transport.internal_error(e)

    handler.register_start_callback(start)
    handler.register_end_callback(end)

    def undo():
        pairs = ((handler.remove_start_callback, start), (handler.remove_end_callback, end))
        for remove, fn in pairs:
            try:
                remove(fn)
            except Exception:
                pass

    state.undo.append(undo)


def _sample_record_functions(torch):
    """record_function's enter and exit ops make a RecordFunction and are not observed by one,
    yet a dispatch mode sees them (MemoryTracker names them): sample them as they return.
    (C++'s own user scopes, as c10d's collectives open, are not ops and are not sampled.)"""
    try:
        rf = torch.autograd.profiler.record_function
        profiler_ops = torch.ops.profiler
        enter = profiler_ops._record_function_enter_new.default
        exit_ = profiler_ops._record_function_exit._RecordFunction
    except Exception:
        return
    codes = [
        ops.intern(("op", f.__name__), f.__name__, bool(f._schema.is_mutable))
        for f in (enter, exit_)
    ]
    orig_enter, orig_exit = rf.__enter__, rf.__exit__

    def __enter__(self):
        r = orig_enter(self)
        if ops._native is not None and state.active:
            ops.sample(codes[0], ops._gtid() != -1)
        return r

    def __exit__(self, *exc):
        r = orig_exit(self, *exc)
        if ops._native is not None and state.active:
            ops.sample(codes[1], ops._gtid() != -1)
        return r

    rf.__enter__, rf.__exit__ = __enter__, __exit__

    def undo():
        rf.__enter__, rf.__exit__ = orig_enter, orig_exit

    state.undo.append(undo)
