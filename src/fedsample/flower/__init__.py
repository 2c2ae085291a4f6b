"""fedsample on Flower (the ``flower`` extra): any strategy as a ServerApp, the client procedures as a ClientApp.

``FlowerFederation`` carries ``report_size``, ``probe`` and ``train`` as Flower messages (Message API, a
ServerApp's ``Grid``), so ``Strategy.round`` runs unchanged; ``client_app()`` serves the procedures on a
node's own data; ``server_app()`` runs a recipe for some rounds. The core of fedsample never imports this.
Flower's telemetry and update check are switched off before flwr is imported (:mod:`fedsample.runtime.telemetry`;
``FLWR_TELEMETRY_ENABLED=1`` set by the user turns telemetry back on).
"""

from fedsample.runtime.telemetry import quiet_flower

quiet_flower()  # before any flwr import below: flwr reads FLWR_TELEMETRY_ENABLED once, at import

from fedsample.runtime import lazy  # noqa: E402

from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.federation import FlowerFederation, discover_nodes  # noqa: E402
from fedsample.flower.node import client_app  # noqa: E402
from fedsample.flower.server import FlowerRun, run_server, server_app  # noqa: E402

__all__ = ["AppConfig", "FlowerFederation", "FlowerRun", "client_app", "discover_nodes", "run_server", "server_app"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
