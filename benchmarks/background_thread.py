"""What the background thread (``fedsample.background``) pays in a FedSampling round: the same round with the
round's bookkeeping (the secure sum's per-client count-noise shares, the round record's cohort facts) on the
background thread, as the library does, ÷ the same round with that work done in line where it is asked for.

The round is ``fedsampling_round_vs_centralized.py``'s (Fashion-MNIST, log-normal sizes mean 2 sigma 4, about
30,000 clients, K = 2048, MLP, the vectorized federation under the secure sum, torch on one thread). The two
variants alternate round by round in one process (``_common.paired_ratios``); the verdict is the median ratio and
its distribution-free 95% interval: the thread is kept only where it takes >= 5% off the round (ratio <= 0.95).

Run: python benchmarks/background_thread.py [--smoke]
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from _common import arguments, best_of, dataset, emit, footer, header, paired_median, paired_ratios

import fedsample.federation.secure_sum as secure_sum
import fedsample.strategy as strategy_module
from fedsample import recipes
from fedsample.data import LogNormalSizes, partition
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import MLP, initial_parameters

LR = 0.05


class Done:
    """Work computed in line, with the background thread's ``result()``."""

    def __init__(self, value: object) -> None:
        self.value = value

    def result(self) -> object:
        return self.value


@contextmanager
def in_line() -> Iterator[None]:
    """The round's background work computed where it is queued (the modules' own ``in_background`` swapped back
    after)."""
    saved = strategy_module.in_background, secure_sum.in_background

    def now(compute: Callable[..., object], *args: object) -> Done:
        return Done(compute(*args))

    strategy_module.in_background = secure_sum.in_background = now  # type: ignore[assignment]
    try:
        yield
    finally:
        strategy_module.in_background, secure_sum.in_background = saved


def main(smoke: bool) -> None:
    header(smoke)
    torch.set_num_threads(1)
    fed = partition(dataset(smoke), LogNormalSizes(mean=2, sigma=4), seed=0)
    K = 128 if smoke else 2048
    module = MLP(hidden=64).build(fed.dataset.input_shape, fed.dataset.num_classes)
    params = initial_parameters(module, 0)
    federation = secure_sum.with_secure_sum(VectorizedSimulator(fed, module, seed=0), True)
    strategy = recipes.fedsampling(K=K, epsilon=3.0, M=300, server_lr=LR)
    state = strategy.init_state(params)

    def background_round() -> object:
        return strategy.round(federation, params, state, 0, 0)

    def in_line_round() -> object:
        with in_line():
            return strategy.round(federation, params, state, 0, 0)

    emit("clients", fed.num_clients)
    emit("K", K)
    emit("round_s_background", best_of(background_round))
    emit("round_s_in_line", best_of(in_line_round))
    paired_median("background_vs_in_line", paired_ratios(background_round, in_line_round, pairs=400))
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
