"""No phoning home: Flower's telemetry and update check stay off unless the user turns them on.

flwr 1.41 and flwr-datasets post usage events to ``telemetry.flower.ai`` unless ``FLWR_TELEMETRY_ENABLED=0``
is set when they are imported (``flwr/supercore/telemetry.py`` reads it once, at import), and Flower's
programs (``flwr``, ``flower-superlink``, ``flower-supernode``) ask an update-check endpoint unless
``FLWR_DISABLE_UPDATE_CHECK=1``. fedsample calls :func:`quiet_flower` before it imports ``flwr`` or
``flwr_datasets`` (the ``fedsample.flower`` package, the Flower Datasets loaders): the variables the user has
not set are set, so every process started from here inherits them, and a telemetry module imported before
fedsample (its switch already read) is switched off too. A user who wants Flower's telemetry sets
``FLWR_TELEMETRY_ENABLED=1`` (and ``FLWR_DISABLE_UPDATE_CHECK=0`` for the update check) before starting
Python. A leaf module: it imports nothing of fedsample and nothing of Flower.
"""

from __future__ import annotations

import os
import sys

#: The variables and the values that keep Flower from reporting to its servers.
FLOWER_QUIET = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
#: Flower's telemetry modules, which read ``FLWR_TELEMETRY_ENABLED`` once into a module constant.
TELEMETRY_MODULES = ("flwr.supercore.telemetry", "flwr_datasets.common.telemetry")


def quiet_flower() -> dict[str, str]:
    """Set :data:`FLOWER_QUIET`'s variables the user has not set, and align the switch of any Flower telemetry
    module already imported with the environment (off unless the user set ``FLWR_TELEMETRY_ENABLED=1``).
    Returns the values now in force."""
    for key, value in FLOWER_QUIET.items():
        os.environ.setdefault(key, value)
    for name in TELEMETRY_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "FLWR_TELEMETRY_ENABLED"):
            module.FLWR_TELEMETRY_ENABLED = os.environ["FLWR_TELEMETRY_ENABLED"]
    return {key: os.environ[key] for key in FLOWER_QUIET}
