"""portable-dask: a :mod:`portable.compute` launcher on Dask (``dask://``, ``dask+local://``)."""

from __future__ import annotations

from .launcher import DaskLauncher, submit_callable

__all__ = ["DaskLauncher", "submit_callable"]
