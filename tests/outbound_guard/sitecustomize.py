"""Loaded by every Python process started with this folder on PYTHONPATH: with ``FEDSAMPLE_OUTBOUND_LOG`` set,
the outbound guard is installed and each outbound attempt is appended to that file (the Flower processes of the
deployment tests: SuperLink, SuperNodes, ``flwr``, and the ServerApp and ClientApp processes they start)."""

import os

if os.environ.get("FEDSAMPLE_OUTBOUND_LOG"):
    import outbound

    outbound.install(log=os.environ["FEDSAMPLE_OUTBOUND_LOG"])
