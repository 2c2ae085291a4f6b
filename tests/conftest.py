import torch

# Tiny models: intra-op threads only add contention on the 2-core machines this suite runs on.
torch.set_num_threads(1)

# Property-based tests explore new examples on every local run; under CI (CI=true) they replay a fixed,
# seed-derived set, so a green commit stays green (a counterexample found locally becomes a regression test).
try:
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        settings.load_profile("ci")
except ImportError:  # hypothesis is a dev extra; the tests that use it import it themselves
    pass
