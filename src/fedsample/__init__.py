"""fedsample: sampling for federated learning, with honest probabilities and private size reports."""

from fedsample import data, models, privacy, recipes
from fedsample.sampling import design  # noqa: F401  (fs.sampling.design)
from fedsample.simulation import SimulationResult, simulate
from fedsample.strategy import Strategy

__version__ = "0.1.0"
__all__ = ["data", "models", "privacy", "recipes", "simulate", "SimulationResult", "Strategy", "__version__"]
