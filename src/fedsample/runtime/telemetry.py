"""No phoning home: Flower's telemetry and update check, and Ray's usage statistics, stay off unless the user
turns them on.

flwr 1.41 and flwr-datasets post usage events to ``telemetry.flower.ai`` unless ``FLWR_TELEMETRY_ENABLED=0``
is set when they are imported (``flwr/supercore/telemetry.py`` reads it once, at import), and Flower's
programs (``flwr``, ``flower-superlink``, ``flower-supernode``) ask an update-check endpoint unless
``FLWR_DISABLE_UPDATE_CHECK=1``. Ray (fedsample's Ray federation, and Flower's simulation runtime, which runs
on Ray) reports usage to ``usage-stats.ray.io`` from its dashboard process unless ``RAY_USAGE_STATS_ENABLED=0``
when Ray starts; that process probes the cloud metadata addresses whatever the switch says, and no setting stops
it (docs/flower.md, "No phoning home"). fedsample calls :func:`quiet_flower` before
it imports ``flwr`` or ``flwr_datasets`` (the ``fedsample.flower`` package, the Flower Datasets loaders) and
:func:`quiet_ray` before it imports Ray: the variables the user has not set are set, so every process started
from here inherits them, and a Flower telemetry module imported before fedsample (its switch already read) is
switched off too. A user who wants them sets ``FLWR_TELEMETRY_ENABLED=1``, ``FLWR_DISABLE_UPDATE_CHECK=0`` or
``RAY_USAGE_STATS_ENABLED=1`` before starting Python. A leaf module: it imports nothing of fedsample, Flower
or Ray.
"""

from __future__ import annotations

import os
import sys

__all__ = ["FLOWER_QUIET", "RAY_QUIET", "TELEMETRY_MODULES", "quiet_flower", "quiet_ray"]

#: The variables and the values that keep Flower from reporting to its servers.
FLOWER_QUIET = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
#: The variable and the value that keep Ray from reporting usage (read when Ray starts its processes).
RAY_QUIET = {"RAY_USAGE_STATS_ENABLED": "0"}
#: Flower's telemetry modules, which read ``FLWR_TELEMETRY_ENABLED`` once into a module constant.
TELEMETRY_MODULES = ("flwr.supercore.telemetry", "flwr_datasets.common.telemetry")


def quiet_ray() -> dict[str, str]:
    """Set :data:`RAY_QUIET`'s variable unless the user has set it; returns the value now in force."""
    for key, value in RAY_QUIET.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in RAY_QUIET}


def quiet_flower() -> dict[str, str]:
    """Set :data:`FLOWER_QUIET`'s variables (and :data:`RAY_QUIET`'s, for the simulation runtime) the user has not
    set, and align the switch of any Flower telemetry module already imported with the environment (off unless
    the user set ``FLWR_TELEMETRY_ENABLED=1``). Returns the values now in force."""
    quiet_ray()
    for key, value in FLOWER_QUIET.items():
        os.environ.setdefault(key, value)
    for name in TELEMETRY_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "FLWR_TELEMETRY_ENABLED"):
            setattr(module, "FLWR_TELEMETRY_ENABLED", os.environ["FLWR_TELEMETRY_ENABLED"])  # noqa: B010 (a module attribute mypy cannot see)
    return {key: os.environ[key] for key in {**FLOWER_QUIET, **RAY_QUIET}}
