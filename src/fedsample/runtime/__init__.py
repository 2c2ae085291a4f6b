"""Runtime plumbing: how a run uses the machine, not what it computes.

Lazy submodules (``lazy``), the garbage collector during a run (``heap``), memory checks (``memory``), the device
and threads (``device``), each warning once per run (``warned``), the rows trained that a simulation measures and
never tells the server (``measured``), Flower's and Ray's telemetry switched off (``telemetry``), a run's
fingerprint for resuming (``fingerprint``), the JSON value type (``records``) and what a round computed from read-only arrays, given again while the
same arrays come back (``memo``). Every module here is a leaf: none imports
the rest of fedsample at import time, so every layer may import them.
"""

from __future__ import annotations

from fedsample.runtime import lazy

__all__ = ["device", "fingerprint", "heap", "lazy", "measured", "memory", "records", "telemetry", "warned"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
