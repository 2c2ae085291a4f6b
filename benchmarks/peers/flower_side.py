"""Flower (``flwr[simulation]``, Ray backend) on a small-clients workload with ``num_cpus`` per client
actor (fractions: several actors per core). Run with Flower's own virtual environment and this folder on PYTHONPATH (run.py does both):
``python benchmarks/peers/flower_side.py WORKLOAD_FILE WORKLOAD NUM_CPUS ROUNDS``."""

from __future__ import annotations

import os
import resource
import sys

# No phoning home (docs/flower.md): Flower's telemetry (read when flwr is imported), its update check and Ray's
# usage statistics stay off unless the user set them.
for _key, _value in {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ.setdefault(_key, _value)

import numpy as np  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from workload import PROCESS_START, emit_result, workload_named  # noqa: E402


def main(path: str, workload: str, num_cpus: float, rounds: int) -> None:
    os.environ.update(PEERS_WORKLOAD_FILE=path, PEERS_WORKLOAD=workload, PEERS_ROUNDS=str(rounds))
    import flower_apps

    w = workload_named(workload)
    run_simulation(server_app=flower_apps.server_app, client_app=flower_apps.client_app, num_supernodes=w.users,
                   backend_config={"client_resources": {"num_cpus": num_cpus, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": os.cpu_count()}})
    ends = flower_apps.ROUND_ENDS
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    emit_result("flower", ends[1] - PROCESS_START, list(np.diff(ends[1:])), num_cpus=num_cpus, threads=1,
                largest_child_rss_mb=children, rounds_seen=len(ends) - 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
