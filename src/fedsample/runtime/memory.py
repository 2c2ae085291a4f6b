"""Memory a request needs against memory this machine has: a size that cannot fit is refused before it is
tried, with the estimate and what is available, instead of a MemoryError (or the kernel killing the process)
after the work has started.

The available memory is /proc/meminfo's ``MemAvailable`` (Linux), capped by a cgroup's limit less its usage
where one applies (containers), else ``os.sysconf``'s available physical pages; where neither can be read
nothing is refused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["available_memory", "capped_processes", "check_fits", "check_int64", "processes_that_fit"]

INT64_MAX = 2**63 - 1


def available_memory() -> int | None:
    """Bytes this process can still allocate without swapping, or None when the system does not say."""
    amounts = [a for a in (meminfo_available(), cgroup_headroom()) if a is not None]
    if amounts:
        return min(amounts)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_headroom() -> int | None:
    """A cgroup's memory limit less its current usage (v2, then v1), or None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # v1 writes a huge number for "no limit"
            return max(int(limit) - usage, 0)
    return None


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_fits(what: str, needed: float, available: int | None = None) -> None:
    """Refuse (one ValueError line) a request whose estimated memory ``needed`` exceeds ``available``
    (default: :func:`available_memory`; unknown: nothing is refused)."""
    if available is None:
        available = available_memory()
    if available is not None and needed > available:
        raise ValueError(f"{what} needs about {human_bytes(needed)} of memory; {human_bytes(available)} is available")


def processes_that_fit(asked: int, per_process: float, available: int | None = None) -> int:
    """How many of ``asked`` worker processes fit in memory at once when each needs about ``per_process`` bytes at
    its peak: min(asked, available // per_process), at least 1 (one process runs in any case); ``available``:
    default :func:`available_memory` (unknown: ``asked``)."""
    if available is None:
        available = available_memory()
    if available is None or per_process <= 0:
        return asked
    return max(1, min(asked, int(available // per_process)))


def capped_processes(what: str, asked: int, per_process: float, available: int | None = None) -> int:
    """:func:`processes_that_fit`, saying in one line on stderr when it is fewer than ``asked`` (``what``: the
    command and its option, e.g. ``"run --jobs"``)."""
    if available is None:
        available = available_memory()
    fit = processes_that_fit(asked, per_process, available)
    if fit < asked:
        print(f"fedsample: {what} {asked} capped at {fit}: each worker process needs about {human_bytes(per_process)} "
              f"at its peak and {human_bytes(available or 0)} of memory is available", file=sys.stderr, flush=True)
    return fit


def check_int64(name: str, value: int) -> None:
    """Refuse an integer that numpy's int64 cannot hold (one ValueError line naming it)."""
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        shown = str(value) if value.bit_length() < 128 else f"a {value.bit_length()}-bit integer"
        raise ValueError(f"{name} = {shown} is beyond the largest supported integer 2^63 - 1")
