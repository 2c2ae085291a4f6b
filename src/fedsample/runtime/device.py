"""Where a run computes: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when present, else CPU).

A leaf module (torch only): :func:`resolve_device` turns the user's word into a ``torch.device`` with one
clear error line for a device this machine does not have; :func:`free_memory` is the free memory the
vectorized engine may fill on that device.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Iterator, TypeVar, cast

import torch

__all__ = ["free_memory", "resolve_device", "to_device", "torch_threads", "use_threads"]

DEVICES = ("auto", "cpu", "cuda", "cuda:N")


def resolve_device(spec: str | torch.device | None = "cpu") -> torch.device:
    """The ``torch.device`` named by ``spec``; ``"auto"`` (or None) takes CUDA device 0 when present, else CPU.

    Raises ``ValueError`` (one line) for an unknown name, for CUDA on a machine without a usable CUDA
    device, and for a CUDA index this machine does not have."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto"):
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(spec.strip().lower() if isinstance(spec, str) else spec)
    except (RuntimeError, ValueError):
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {spec!r}") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {spec!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device {spec!r} asked for, but no CUDA GPU is available here (use device 'cpu' or 'auto')")
    index = 0 if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {spec!r}: this machine has {torch.cuda.device_count()} CUDA device(s) (cuda:0 ...)")
    return torch.device("cuda", index)


def free_memory(device: torch.device) -> int | None:
    """Free bytes on a CUDA ``device`` (plus what torch's cache holds and could reuse); None on the CPU."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


T = TypeVar("T")


def to_device(value: T, device: torch.device) -> T:
    """``value`` with every tensor of it (nested in dicts, lists, tuples) moved to ``device``; the rest unchanged (the
    same structure, so the same type)."""
    if isinstance(value, dict):
        return cast(T, {k: to_device(v, device) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return cast(T, type(value)(to_device(v, device) for v in value))
    if isinstance(value, torch.Tensor):
        return cast(T, value.to(device))
    return value


def use_threads(threads: int) -> None:
    """Run torch's CPU work on ``threads`` threads, and numpy's BLAS (OpenBLAS) on one: a training process's
    numpy matrix products are small (a sampler's covariance, eigenvectors and similarities), and OpenBLAS's
    workers, once woken, spin on the cores torch's step needs (benchmarks/README.md has the figures). The BLAS limit is set through threadpoolctl (scikit-learn's dependency), for the process."""
    torch.set_num_threads(max(1, int(threads)))
    blas_on_one_thread()


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` for the block (a process-wide setting), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def blas_on_one_thread() -> AbstractContextManager[object]:
    """Limit numpy's BLAS to one thread (:func:`use_threads` says why); the returned threadpoolctl limiter, used as a
    context manager (``with blas_on_one_thread():``), restores the previous limits when the block ends, as
    :func:`fedsample.simulate` does for the run it makes."""
    from threadpoolctl import threadpool_limits

    limiter: AbstractContextManager[object] = threadpool_limits(limits=1, user_api="blas")  # threadpoolctl ships no types
    return limiter
