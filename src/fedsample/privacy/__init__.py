"""Privacy: what leaves a client, how it is protected, and what a run spends.

- :mod:`~fedsample.privacy.reports`: ε-LDP randomized-response size reports (Qi et al. 2023, Eq. 1) and the
  server's estimate of the total size (Eq. 2);
- :mod:`~fedsample.privacy.sizes`: the size-reporting policies a strategy declares (``ExactSizes``,
  ``RandomizedSizes``) and what the server holds after a size query (``SizeInfo``);
- :mod:`~fedsample.privacy.size_estimate`: the estimate's bias and RMSE, and M chosen by RMSE;
- :mod:`~fedsample.privacy.noise`: clipping and Gaussian noise on the update (``UpdateNoise``; per-example
  clipping with noise on the cohort's sum, ``PerExampleNoise``);
- :mod:`~fedsample.privacy.accounting`: what one client has spent over a run, release by release;
- :mod:`~fedsample.privacy.ledger`: the run's privacy ledger (every release as a dp-accounting event, epsilon by
  PLD or RDP, the budget; ``Accounting``, ``Ledger``);
- :mod:`~fedsample.privacy.amplification`: the releases of each call and the amplification their conditions allow;
- :mod:`~fedsample.privacy.recorder`: the federation as the ledger sees it (the hook in ``Strategy.round``);
- :mod:`~fedsample.privacy.attacks`: the attacks that measure what the server can learn;
- :mod:`~fedsample.privacy.command`: the ``fedsample privacy`` command.

The names used most are importable from here (``fs.privacy.alpha_for``, ``fs.privacy.UpdateNoise``, ...).
"""

from fedsample.runtime import lazy

from fedsample.privacy.ledger import Accounting
from fedsample.privacy.noise import PerExampleNoise, UpdateNoise
from fedsample.privacy.reports import (
    alpha_for, clip_size, estimate_total, estimator_variance, privacy_audit, randomized_response, response_distribution,
    validate_reports,
)
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes, SizeInfo, SizeReporting

__all__ = [
    "Accounting", "ExactSizes", "PerExampleNoise", "RandomizedSizes", "SizeInfo", "SizeReporting", "UpdateNoise",
    "alpha_for", "clip_size", "estimate_total", "estimator_variance", "privacy_audit", "randomized_response",
    "response_distribution", "validate_reports",
]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
