"""Whether a process on this host is alive: signal 0, then its state (a zombie is not). No Dagster here: the
development stack's process supervision and the code location's sensors both use it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def proc_stat_state(pid: int) -> str | None:
    """The one-letter state of `pid` from /proc (None without /proc or when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) S ..." - comm may contain spaces and parentheses
    return stat[stat.rfind(")") + 2 :].split(" ", 1)[0]


def process_alive(pid: int | None) -> bool:
    """True when `pid` is a live (not zombie) process; one of another user counts as alive."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = proc_stat_state(pid)
    if state is None and sys.platform != "linux":
        try:
            state = subprocess.run(
                ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False
            ).stdout.strip()[:1]
        except OSError:
            state = None
    return state != "Z"
