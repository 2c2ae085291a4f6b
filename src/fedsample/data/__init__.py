"""Datasets, partitions and their statistics."""

from fedsample.data.types import Dataset, FederatedData
from fedsample.data.datasets import load_dataset, available_datasets
from fedsample.data.partition import IID, LogNormalSizes, partition

__all__ = ["Dataset", "FederatedData", "load_dataset", "available_datasets", "IID", "LogNormalSizes", "partition"]
