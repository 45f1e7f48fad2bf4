"""The torch versions the agent works with, and the check activate() makes before anything else
touches torch (docs/record.md, "Torch versions").

OLDEST is the first release with every internal the agent calls unguarded
(torch.autograd.graph._get_grad_fn_or_grad_acc and torch.compiler.is_compiling came in 2.3);
2.3.1 was recorded end to end (docs/record.md, "Torch versions", says what differs there).
NEWEST is the newest torch `scripts/torch-versions.sh` recorded with. A newer torch may work:
MEMTRACK_ANY_TORCH=1 records under any version.
"""

import os
import re

OLDEST = (2, 3)
NEWEST = (2, 15)


def supported_range():
    return f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"


def parse(version):
    """(major, minor) of a torch version string ("2.15.0+cu132", "2.3.0a0+git1234"), or None."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def unsupported(version, override):
    """Why this torch cannot be recorded, or None when it can."""
    if override:
        return None
    found = parse(version)
    if found is None:
        why = "an unreadable version"
    elif found < OLDEST:
        why = "older than the agent's oldest"
    elif found > NEWEST:
        why = "newer than any torch memtrack was tried with"
    else:
        return None
    return (
        f"torch {version} is not supported ({why}): memtrack records torch "
        f"{supported_range()}. Install a torch in that range, or set MEMTRACK_ANY_TORCH=1 to "
        "record anyway (untested)"
    )


# `--observer auto` picks the compiled observer from this torch on: before it, torch.compile's
# backward is compiled lazily at the first backward with no compile callback around it (2.3.1:
# its ops sampled as the program's), and the agent's dispatch mode is taken off while compiled
# functions run (compiled.watch_dynamo_calls), which the compiled observer does not mirror
COMPILED_OBSERVER_FROM = (2, 9)


def compiled_observer_checked(torch):
    """Whether `auto` may pick the compiled observer on this torch: COMPILED_OBSERVER_FROM on,
    with dynamo's callbacks around the lazy backward compile (looked for in the source, since
    importing torch._dynamo costs about a second at start-up)."""
    found = parse(getattr(torch, "__version__", ""))
    if found is None or found < COMPILED_OBSERVER_FROM:
        return False
    try:
        path = os.path.join(os.path.dirname(torch.__file__), "_dynamo", "callback.py")
        with open(path, encoding="utf-8") as f:
            return "LAZY_BACKWARD" in f.read()
    except OSError:
        return False
