"""The tests' guard against outbound connections (``outbound``), and a ``sitecustomize`` that installs it in
every Python process started with this folder on PYTHONPATH and ``FEDSAMPLE_OUTBOUND_LOG`` set."""
