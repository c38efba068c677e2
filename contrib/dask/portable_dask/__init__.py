"""portable-cloud-dask: a :mod:`portable.compute` launcher on Dask (``dask://``, ``dask+local://``)."""

from __future__ import annotations

from .launcher import DaskLauncher, local_cluster, submit_callable

__all__ = ["DaskLauncher", "local_cluster", "submit_callable"]
