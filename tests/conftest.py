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

#: The test modules that run Flower (or Flower Datasets) or Ray: no outbound connection may be attempted in them.
OFFLINE_MODULES = ("test_flower", "test_data_hf", "test_ray")
#: The test modules that start Ray's processes (``ray.init``, ``ray start``, Flower's simulation runtime): each of
#: those processes loads the guard too (``sitecustomize``), and may attempt nothing but Ray's cloud-metadata probe.
RAY_MODULES = ("test_ray", "test_flower_simulation", "test_flower_door")
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outbound_guard")


@pytest.fixture(autouse=True, scope="module")
def ray_processes_guarded(request, tmp_path_factory):
    """In the modules that start Ray, every Python process Ray starts (its dashboard, raylet-started workers, the
    ``ray start`` nodes) inherits ``FEDSAMPLE_OUTBOUND_LOG`` and the guard on ``PYTHONPATH`` (set before any of the
    module's fixtures starts Ray), so it refuses and logs each outbound attempt; at the module's end nothing but Ray's
    dashboard's cloud-metadata probe (``outbound.RAY_CLOUD_PROBE``, which no setting turns off) may be logged."""
    if not request.module.__name__.startswith(RAY_MODULES):
        yield
        return
    log = tmp_path_factory.mktemp("outbound") / "outbound.log"
    saved = {key: os.environ.get(key) for key in ("FEDSAMPLE_OUTBOUND_LOG", "PYTHONPATH")}
    path = [GUARD, saved["PYTHONPATH"] or ""]
    os.environ.update(FEDSAMPLE_OUTBOUND_LOG=str(log), PYTHONPATH=os.pathsep.join(p for p in path if p))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    logged = log.read_text().splitlines() if log.exists() else []
    assert not outbound.unexplained(logged), f"outbound connections attempted by Ray's processes: {logged}"


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


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for the test (the numbers client threads reproduce to the bit), the caller's count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
