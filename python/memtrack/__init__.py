"""memtrack from Python (docs/python.md): record inside a program or a notebook, capture
allocator snapshots, dump one at an out-of-memory error.

- ``with memtrack.record("run.pkl") as rec:`` (or ``@memtrack.record("run.pkl")``): the agent
  of ``memtrack record``, started in this process; at the end of the block the same stats file
  as ``memtrack record`` writes. ``rec.summary()``, ``rec.plot()``; in Jupyter ``rec`` shows
  the summary and the plot.
- ``with memtrack.capture("snap.pickle"):``: ``torch.cuda.memory._record_memory_history`` then
  ``_dump_snapshot``.
- ``memtrack.snapshot_on_oom("oom.pickle")``: the snapshot at the out-of-memory error.

Nothing here raises into the program: what cannot be done is a ``RuntimeWarning`` (category
``memtrack.MemtrackWarning``) and the program goes on. The files are read and written by the
``memtrack`` command installed beside this package (``memtrack.binary()``); this package never
parses them itself.
"""

import contextlib
import html
import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings

__all__ = [
    "MemtrackWarning",
    "Recording",
    "binary",
    "capture",
    "record",
    "snapshot_on_oom",
]


class MemtrackWarning(RuntimeWarning):
    """What memtrack could not do (the program goes on)."""


def _warn(text):
    warnings.warn(f"memtrack: {text}", MemtrackWarning, stacklevel=3)


def binary():
    """The ``memtrack`` command this package runs: ``$MEMTRACK_BINARY`` if set, else the one
    in this environment's scripts folder (where pip put it), else next to the Python
    executable, else the first on ``PATH``. Raises FileNotFoundError when there is none."""
    env = os.environ.get("MEMTRACK_BINARY")
    if env:
        return env
    places = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    for d in places:
        p = os.path.join(d or "", "memtrack")
        if d and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    found = shutil.which("memtrack")
    if found:
        return found
    raise FileNotFoundError(
        "the memtrack command was not found (not in "
        + ", ".join(d for d in places if d)
        + " nor on PATH): pip install memtrack, or set MEMTRACK_BINARY"
    )


def _run(*args):
    """Run the memtrack command; (exit code, stdout, stderr)."""
    p = subprocess.run([binary(), *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ---- record


_AGENT = __name__ + "._memtrack_agent"
_recording = [None]  # the Recording in progress in this process


def _fresh_agent():
    """The agent imported anew: its modules' state belongs to one recording."""
    for name in [m for m in sys.modules if m == _AGENT or m.startswith(_AGENT + ".")]:
        del sys.modules[name]
    return importlib.import_module(_AGENT + ".inprocess")


class Recording(contextlib.ContextDecorator):
    """One in-process recording into ``path`` (see ``record``). After the block: ``ok``
    (the file was written), ``summary()``, ``plot()``, and in Jupyter the summary and the plot
    inline."""

    def __init__(self, path="memtrack.pkl", backend="auto", observer="auto"):
        self.path = os.fspath(path)
        self.backend = backend
        self.observer = observer
        self.ok = False
        self.message = "not recorded yet"
        self._agent = None
        self._journal = None

    # -- the block

    def __enter__(self):
        self.ok = False
        self._agent = None
        try:
            self._start()
        except Exception as e:
            self.message = f"not recording: {e}"
            _warn(f"{self.path}: {self.message}")
            self._cleanup()
        return self

    def _start(self):
        if _recording[0] is not None:
            raise RuntimeError(f"{_recording[0].path} is being recorded in this process already")
        outer = sys.modules.get("_memtrack_agent")
        if outer is not None and getattr(outer.state, "active", False):
            raise RuntimeError("this process is recorded by `memtrack record` already")
        binary()  # no command to write the file with: say so now, not after the block
        import torch

        directory = os.path.dirname(os.path.abspath(self.path))
        name = os.path.basename(self.path)
        # as `memtrack record` makes its journal: NAME.journal-XXXXXXXX beside the output,
        # fresh and private (0700 whatever the umask), so a process killed in the block leaves
        # what `memtrack record --recover` reads, and no other user can put anything there
        self._journal = tempfile.mkdtemp(prefix=f"{name}.journal-", dir=directory)
        os.chmod(self._journal, 0o700)
        agent = _fresh_agent()
        agent.start(torch, self._journal, self.backend, self.observer)
        self._agent = agent
        _recording[0] = self
        self.message = "recording"

    def __exit__(self, tp, value, tb):
        if self._agent is None:
            return False
        agent, self._agent = self._agent, None
        _recording[0] = None
        try:
            agent.stop(value)
            code, out, err = _run("record", "--recover", self._journal)
            if err:
                sys.stderr.write(err)
            if code == 0:
                self.ok = True
                self.message = f"wrote {self.path}"
            else:
                self.message = f"the recording could not be written (memtrack exit {code})"
                _warn(f"{self.path}: {self.message}: {err.strip()}")
        except Exception as e:
            self.message = f"the recording could not be written: {e}"
            _warn(f"{self.path}: {self.message}")
        finally:
            if self.ok:
                self._cleanup()
        return False  # the block's exception, if any, is the program's

    def _cleanup(self):
        if self._journal and os.path.isdir(self._journal):
            shutil.rmtree(self._journal, ignore_errors=True)

    # -- reading the file (through the memtrack command)

    def _need_file(self):
        if not self.ok:
            raise RuntimeError(f"{self.path}: {self.message}")

    def summary(self, *args):
        """``memtrack summary PATH [ARGS]``: the text it prints."""
        self._need_file()
        code, out, err = _run("summary", self.path, *map(str, args))
        if code != 0:
            raise RuntimeError(f"memtrack summary {self.path}: {err.strip()}")
        return out

    def plot(self, output=None, *args):
        """``memtrack plot PATH -o OUTPUT [ARGS]``: with no output, the SVG's text."""
        self._need_file()
        target = os.fspath(output) if output is not None else "-"
        code, out, err = _run("plot", self.path, "-o", target, *map(str, args))
        if code != 0:
            raise RuntimeError(f"memtrack plot {self.path}: {err.strip()}")
        return out if output is None else target

    def _repr_html_(self):
        """In a notebook: the picture first, scaled to the cell's width (its viewBox kept, no
        scroller), then the summary under a ``<details>`` the reader can fold."""
        title = html.escape(f"memtrack: {self.path}")
        if not self.ok:
            return f"<p><b>{title}</b>: {html.escape(self.message)}</p>"
        parts = [f"<p><b>{title}</b></p>"]
        try:
            parts.append(f'<div style="width:100%">{_fit_width(self.plot())}</div>')
        except Exception as e:
            parts.append(f"<p>plot: {html.escape(str(e))}</p>")
        try:
            text = self.summary()
            parts.append(
                "<details open><summary>summary</summary>"
                f'<pre style="overflow-x:auto">{html.escape(text)}</pre></details>'
            )
        except Exception as e:
            parts.append(f"<p>summary: {html.escape(str(e))}</p>")
        return "\n".join(parts)

    def __repr__(self):
        return f"<memtrack.Recording {self.path!r}: {self.message}>"


def _fit_width(svg):
    """The SVG scaled to its container's width: its root's fixed width and height give way to
    width 100% (the viewBox keeps the aspect), so a narrow cell shows all of it, legend too."""
    import re

    head = re.search(r"<svg\b[^>]*>", svg)
    if head is None or "viewBox" not in head.group(0):
        return svg
    tag = re.sub(r'\s(width|height)="[^"]*"', "", head.group(0))
    tag = tag.replace(
        "<svg", '<svg width="100%" style="display:block;height:auto;max-width:100%"', 1
    )
    return svg[: head.start()] + tag + svg[head.end() :]


def record(path="memtrack.pkl", *, backend="auto", observer="auto"):
    """Record the block (or each call of the decorated function) into ``path``: the file
    ``memtrack record -o path -- python …`` writes, per op and per module, read by every
    memtrack command and by PyTorch's ``MemoryTracker.load``. ``backend``: ``"auto"`` (CUDA
    when available), ``"cuda"`` or ``"cpu"``. ``observer``: what sees each op, as ``memtrack
    record --observer`` (``"auto"``, ``"python"`` or ``"compiled"``). Nothing raises into the
    program: a recording that cannot start or be written is a warning, and the block runs all
    the same."""
    return Recording(path, backend, observer)


# ---- allocator snapshots


def _cuda(what):
    """torch, if it has a CUDA device; else None, with a warning naming `what`."""
    try:
        import torch
    except Exception as e:
        _warn(f"{what}: torch cannot be imported ({e}); nothing done")
        return None
    if not torch.cuda.is_available():
        _warn(
            f"{what}: no CUDA device (torch.cuda.is_available() is False): allocator "
            "snapshots need CUDA; nothing done"
        )
        return None
    return torch


def _history_settings(torch, max_entries):
    """The settings of _record_memory_history that answer questions: every event with its
    Python and C++ stack, annotations (record_function) too, where this torch has them."""
    import inspect

    want = {
        "enabled": "all",
        "context": "all",
        "stacks": "all",
        "max_entries": int(max_entries),
        "global_record_annotations": True,
    }
    try:
        params = inspect.signature(torch.cuda.memory._record_memory_history).parameters
        return {k: v for k, v in want.items() if k in params}
    except (TypeError, ValueError):
        return {"max_entries": int(max_entries)}


class capture(contextlib.ContextDecorator):
    """Record the allocator's history during the block and write ``path`` (an allocator
    snapshot, ``torch.cuda.memory._dump_snapshot``) at its end, even when it raised: every
    allocation and free, up to the last ``max_entries`` events, with Python and C++ stacks and
    ``record_function`` annotations. Without CUDA: a warning, and the block runs as is."""

    def __init__(self, path="snapshot.pickle", max_entries=100_000):
        self.path = os.fspath(path)
        self.max_entries = max_entries
        self.ok = False
        self._torch = None

    def __enter__(self):
        self.ok = False
        torch = self._torch = _cuda(f"capture({self.path!r})")
        if torch is not None:
            try:
                torch.cuda.memory._record_memory_history(
                    **_history_settings(torch, self.max_entries)
                )
            except Exception as e:
                _warn(f"capture({self.path!r}): _record_memory_history: {e}")
                self._torch = None
        return self

    def __exit__(self, tp, value, tb):
        torch, self._torch = self._torch, None
        if torch is None:
            return False
        try:
            torch.cuda.memory._dump_snapshot(self.path)
            self.ok = True
        except Exception as e:
            _warn(f"capture({self.path!r}): _dump_snapshot: {e}")
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception as e:
            _warn(f"capture({self.path!r}): stopping the history: {e}")
        return False


class OomSnapshot:
    """What ``snapshot_on_oom`` armed: ``armed``, ``path``, ``written`` (after an OOM),
    ``disarm()`` (torch cannot detach an observer: it then does nothing)."""

    def __init__(self, path, armed):
        self.path = path
        self.armed = armed
        self.written = False

    def disarm(self):
        self.armed = False

    def _on_oom(self, device, alloc, device_allocated, device_free):
        if not self.armed:
            return
        try:
            import torch

            torch.cuda.memory._dump_snapshot(self.path)
            self.written = True
            sys.stderr.write(
                f"memtrack: out of memory on cuda:{device} (asked {alloc} bytes): "
                f"wrote {self.path}\n"
            )
        except Exception as e:
            sys.stderr.write(f"memtrack: out of memory, but {self.path} not written: {e}\n")

    def __repr__(self):
        state = "written" if self.written else "armed" if self.armed else "not armed"
        return f"<memtrack.OomSnapshot {self.path!r}: {state}>"


def snapshot_on_oom(path="oom.pickle", max_entries=100_000):
    """Write an allocator snapshot to ``path`` when CUDA runs out of memory, at the failure
    (an out-of-memory observer), with the history of the last ``max_entries`` events turned on
    now so the snapshot says who allocated what. Returns an ``OomSnapshot``. Without CUDA: a
    warning, and nothing armed."""
    path = os.fspath(path)
    torch = _cuda(f"snapshot_on_oom({path!r})")
    handle = OomSnapshot(path, armed=torch is not None)
    if torch is None:
        return handle
    try:
        torch.cuda.memory._record_memory_history(**_history_settings(torch, max_entries))
        torch._C._cuda_attach_out_of_memory_observer(handle._on_oom)
    except Exception as e:
        handle.armed = False
        _warn(f"snapshot_on_oom({path!r}): {e}")
    return handle

