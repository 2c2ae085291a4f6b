"""Datasets, partitions and their statistics.

Heavy dependencies (scikit-learn, matplotlib; Hugging Face datasets and Flower Datasets, the ``hf`` extra)
are imported inside the functions that need them.
"""

from fedsample.runtime import lazy

from fedsample.data.types import Dataset, FederatedData
from fedsample.data.datasets import load_dataset, available_datasets
from fedsample.data.partition import IID, Dirichlet, LocalLongTail, LogNormalSizes, Natural, Shards, partition
from fedsample.data.synthetic import fedprox_synthetic, isfedavg_regression, msd_db
from fedsample.data.report import make_scheme, partition_stats, write_partition_report
from fedsample.data.hf import from_hf, load_hf
from fedsample.data.flower_partitions import from_flwr, with_row_ids

__all__ = [
    "Dataset", "FederatedData", "load_dataset", "available_datasets",
    "IID", "Dirichlet", "Shards", "LogNormalSizes", "LocalLongTail", "Natural", "partition",
    "fedprox_synthetic", "isfedavg_regression", "msd_db",
    "make_scheme", "partition_stats", "write_partition_report",
    "from_hf", "load_hf", "from_flwr", "with_row_ids",
]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
