"""portable's fast storage engine: ``s3://``, ``gs://`` and ``az://`` on obstore (Rust object_store).

Installed, it becomes the default engine of those schemes; ``?engine=fsspec``
picks the fsspec drivers instead and ``?engine=obstore`` asks for this one.
The drivers live in :mod:`portable_obstore.s3`, :mod:`portable_obstore.gcs`
and :mod:`portable_obstore.azure`; importing this package imports none of them.
"""

__all__: list[str] = []
