import os

# No phoning home from the tests or any process they start: Flower's telemetry (read once, when flwr and
# flwr-datasets are imported), its programs' update check and Ray's usage statistics are off before anything
# imports them.
os.environ.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", RAY_USAGE_STATS_ENABLED="0")

import pytest  # noqa: E402
import torch  # noqa: E402

from outbound_guard import outbound  # noqa: E402

# Tiny models: intra-op threads only add contention on the 2-core machines this suite runs on.
torch.set_num_threads(1)

# Property-based tests explore new examples on every local run; under CI (CI=true) they replay a fixed,
# seed-derived set, so a green commit stays green (a counterexample found locally becomes a regression test).
try:
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        settings.load_profile("ci")
except ImportError:  # hypothesis is a dev extra; the tests that use it import it themselves
    pass

#: The test modules that run Flower (or Flower Datasets): no outbound connection may be attempted in them.
OFFLINE_MODULES = ("test_flower", "test_data_hf")


@pytest.fixture(autouse=True)
def no_outbound_connections(request):
    """In the Flower tests, every Python-level attempt to reach another machine is refused and fails the test
    (tests/outbound_guard/outbound.py says what it sees and what it cannot)."""
    if not request.module.__name__.startswith(OFFLINE_MODULES):
        yield
        return
    outbound.attempts.clear()
    outbound.install()
    try:
        yield
    finally:
        outbound.uninstall()
    attempts, outbound.attempts[:] = list(outbound.attempts), []
    assert not attempts, f"outbound connections attempted: {attempts}"
