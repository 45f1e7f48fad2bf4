"""The torch versions the agent works with, and the check activate() makes before anything else
touches torch (docs/record.md, "Torch versions").

OLDEST is the first release with every internal the agent calls unguarded
(torch.autograd.graph._get_grad_fn_or_grad_acc and torch.compiler.is_compiling came in 2.3);
2.3.1 was recorded end to end (docs/record.md, "Torch versions", says what differs there).
NEWEST is the newest torch `scripts/torch-versions.sh` recorded with. A newer torch may work:
MEMTRACK_ANY_TORCH=1 records under any version.
"""

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
