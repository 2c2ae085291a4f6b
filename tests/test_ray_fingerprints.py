"""Run fingerprints through Ray (:mod:`fedsample.federation.ray`): a representative recipe of each kind gives, through
Ray actors, the numbers of the in-process engines to the bit (the digest of ``test_fingerprint_recipes``: final
parameters and every round record, the privacy ledger's included).

- On one actor, the run is the vectorized engine's: its digest is the one pinned in ``tests/fingerprints.json``.
- On two actors, each actor sums its own clients' weighted updates and the server adds the two partial sums in
  actor order: float32 addition in another order than one engine's, so the digest differs from the vectorized
  one (as the process pool's does). It equals the pool's of 2 workers to the bit, which splits the clients and
  adds the partial sums the same way (:mod:`fedsample.federation.sharded`).

One local Ray for the module (4 logical CPUs: a run's actors start while the last run's are still being stopped); each
run starts and stops its own actors."""

import json

import pytest

from ray_support import ray_environment  # sets Ray's environment before Ray is imported

pytest.importorskip("ray", reason="the Ray tests need the extra: pip install 'fedsample[ray]'")

from fedsample.federation.ray import ray_federation, ray_session  # noqa: E402
from test_fingerprint_recipes import FILE, run_digest  # noqa: E402

#: FedSampling (the library default, then per-example noise under the record-level ledger), FedAvg, FedSTS,
#: ISFedAvg (client-held state), IWDS (a data sampler), DELTA (a sampler whose probes are replies).
RECIPES = ["fedsampling", "fedsampling_noised", "fedavg", "fedsts", "isfedavg", "iwds", "delta"]


@pytest.fixture(scope="module")
def local_ray():
    with ray_environment() as temp_dir, ray_session(num_cpus=4, _temp_dir=temp_dir):
        yield


@pytest.mark.parametrize("name", RECIPES)
def test_one_ray_actor_gives_the_vectorized_engines_digest(name, local_ray, one_torch_thread):
    want = json.loads(FILE.read_text())[f"{name}/vectorized"]
    assert run_digest(name, federation=ray_federation(workers=1)) == want


@pytest.mark.parametrize("name", RECIPES)
def test_two_ray_actors_give_the_two_worker_pools_digest(name, local_ray, one_torch_thread):
    assert run_digest(name, federation=ray_federation(workers=2)) == run_digest(name, backend="vectorized", workers=2)
