"""fedsample on Flower (the ``flower`` extra): any strategy as a ServerApp, the client procedures as a ClientApp.

``FlowerFederation`` carries ``report_size``, ``probe`` and ``train`` as Flower messages (Message API, a
ServerApp's ``Grid``), so ``Strategy.round`` runs unchanged; ``client_app()`` serves the procedures on a
node's own data; ``server_app()`` runs a recipe for some rounds. The core of fedsample never imports this.
"""

from fedsample import lazy

from fedsample.flower.config import AppConfig
from fedsample.flower.federation import FlowerFederation, discover_nodes
from fedsample.flower.node import client_app
from fedsample.flower.server import FlowerRun, run_server, server_app

__all__ = ["AppConfig", "FlowerFederation", "FlowerRun", "client_app", "discover_nodes", "run_server", "server_app"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
