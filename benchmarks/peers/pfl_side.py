"""pfl-research (``pfl==0.6.0``) on the CIFAR-10 workload, set up as its own CIFAR-10 IID benchmark does
(``benchmarks/image_classification`` with the baseline config: FederatedAveraging, ``SimulatedBackend``,
``WeightByUser``, a ``PyTorchModel`` with local and central ``torch.optim.SGD``, no central evaluation, no
validation cohort). Run with pfl's own virtual environment (see setup_venvs.sh):
``.venv-pfl/bin/python benchmarks/peers/pfl_side.py WORKLOAD_FILE THREADS ROUNDS [WORKLOAD]`` (``cifar``, or
``tiny-cifar`` for ``run.py --smoke``)."""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import pfl
import torch

from workload import CIFAR, Workload, build_model, emit_result, load_rows, set_threads, workload_named

from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.aggregate.weighting import WeightByUser  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.metrics import Metrics, Weighted  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from workload import PROCESS_START  # noqa: E402


def classification_loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
    """The mean cross-entropy pfl trains on (``loss`` of a pfl PyTorch model)."""
    self.eval() if eval else self.train()
    return torch.nn.functional.cross_entropy(self(x), y)


@torch.no_grad()
def classification_metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict:
    """Summed loss and correct count, weighted by the samples (``metrics`` of a pfl PyTorch model)."""
    self.eval() if eval else self.train()
    logits = self(x)
    return {"loss": Weighted(torch.nn.functional.cross_entropy(logits, y, reduction="sum").item(), len(x)),
            "accuracy": Weighted((logits.argmax(-1) == y).sum().item(), len(x))}


class RoundClock(TrainingProcessCallback):
    """Wall time and this process's CPU time at the end of every central iteration."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        return False, Metrics()


def pfl_model(w: Workload, x: torch.Tensor) -> PyTorchModel:
    """The workload CNN with pfl's ``loss``/``metrics``, local SGD and central SGD at the server lr."""
    module = build_model(w, x)
    module.loss = types.MethodType(classification_loss, module)
    module.metrics = types.MethodType(classification_metrics, module)
    params = [p for p in module.parameters() if p.requires_grad]
    return PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                        central_optimizer=torch.optim.SGD(params, w.server_lr))


def federated_dataset(w: Workload, x: torch.Tensor, y: torch.Tensor) -> FederatedDataset:
    """User ``u`` owns rows ``u*50 … u*50+49``; users are sampled by pfl's ``random`` sampler."""
    users = {u: [x[u * w.per_user:(u + 1) * w.per_user], y[u * w.per_user:(u + 1) * w.per_user]] for u in range(w.users)}
    return FederatedDataset.from_slices(users, get_user_sampler("random", list(range(w.users))))


def main(path: str, threads: int, rounds: int, w: Workload = CIFAR) -> None:
    set_threads(threads)
    torch.manual_seed(0)
    np.random.seed(0)
    x, y, source = load_rows(path)
    data = federated_dataset(w, x, y)
    backend = SimulatedBackend(training_data=data, val_data=data, postprocessors=[WeightByUser()])
    clock = RoundClock()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=rounds + 1, evaluation_frequency=10**9,
                                           train_cohort_size=w.cohort, val_cohort_size=0),
        backend=backend, model=pfl_model(w, x),
        model_train_params=NNTrainHyperParams(local_learning_rate=w.lr, local_num_epochs=w.epochs,
                                              local_batch_size=w.batch),
        model_eval_params=NNEvalHyperParams(local_batch_size=10000), callbacks=[clock])
    times = list(np.diff(clock.ends))
    emit_result("pfl", clock.ends[0] - PROCESS_START, times, list(np.diff(clock.cpu_ends)), data=source, threads=threads,
                version=pfl.__version__)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), workload_named(sys.argv[4]) if len(sys.argv) > 4 else CIFAR)
