"""Devices: where the engine runs, and how many CPU threads it uses.

One home for the device logic of the library, the experiments and the book's build.
"""
from __future__ import annotations

import contextlib

import torch

from ._checks import check_int

__all__ = ["resolve_device", "device_name", "cpu_threads"]


def resolve_device(device="auto"):
    """``"auto"`` -> CUDA when available, else CPU; otherwise ``torch.device(device)``."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or a torch.device, got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    return dev


def device_name(device="auto"):
    """The short name of the resolved device: ``"cpu"`` or ``"cuda"`` (a string, for cache keys)."""
    return resolve_device(device).type


@contextlib.contextmanager
def cpu_threads(device="auto", num_threads=1):
    """Run torch with ``num_threads`` intra-op threads on the CPU, restoring the count afterwards.

    The experiments' tensors are tiny; on a shared, loaded CPU several threads make them 10-50x
    slower (thread contention). Does nothing on CUDA or when ``num_threads`` is None.
    """
    if num_threads is None or resolve_device(device).type != "cpu":
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(check_int("num_threads", num_threads, minimum=1))
    try:
        yield
    finally:
        torch.set_num_threads(old)
