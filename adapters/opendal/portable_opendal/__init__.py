"""portable's ``s3://...?engine=opendal``: whole-object reads on OpenDAL, everything else on obstore.

The driver lives in :mod:`portable_opendal.s3`; importing this package imports nothing else.
"""

__all__: list[str] = []
