"""Where a reproduction ran: CPU model and core count, GPU name, torch and Python versions, and the date."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from fedsample.experiments.timing import utc_now

__all__ = ["hardware", "utc_now"]


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one) and the number of cores."""
    name = platform.processor() or platform.machine() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def gpu_name(device: str) -> str | None:
    """The CUDA device's name (None on the CPU)."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def hardware(device: str) -> dict[str, str | None]:
    """The CPU, the GPU of ``device``, and torch's and Python's versions, for a reproduction's record."""
    import torch

    return {"cpu": cpu_model(), "gpu": gpu_name(device), "torch": torch.__version__, "python": platform.python_version()}

