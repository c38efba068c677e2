"""The fsspec bridge behind :mod:`portable.fsspec` (files, then the file system that opens them)."""
