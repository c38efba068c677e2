"""``python -m tests.emulators.moto_run ARGS``: ``python -m moto.server ARGS`` with one race of moto fixed.

moto 5.2.5's ``FakeKey.etag`` (moto/s3/models.py) computes a single-PUT object's
MD5 lazily, by ``seek(0)`` and ``read()`` of the key's shared buffer, WITHOUT the
key's lock, and caches it. Two requests on moto's threaded server that meet one
new key (a listing, the PUT's own reply, a GET) move each other's position in
that buffer, so a wrong etag can be cached for good (the MD5 of ``b""`` for a
5 MiB object was seen) and a GET can read from a moved position. AWS S3 has no
such race: an object's etag is fixed when its PUT completes.

Here the computation takes the key's own lock, the one moto's ``value`` getter
already takes, so the buffer is read by one request at a time. Nothing else of
moto changes; the fix is for the version pinned in :mod:`.moto_server` and is
checked against it at start.
"""

from __future__ import annotations

import sys

from moto.s3 import models


def _etag(self: models.FakeKey) -> str:
    if self._etag is None:
        with self.lock:  # what the value getter takes: one reader of the buffer at a time
            if self._etag is None:
                value_md5 = models.md5_hash()
                self._value_buffer.seek(0)
                while block := self._value_buffer.read(16 * 1024 * 1024):
                    value_md5.update(block)
                self._etag = value_md5.hexdigest()
    return f'"{self._etag}"'


def main() -> None:
    import moto

    from .moto_server import MOTO_VERSION

    if moto.__version__ != MOTO_VERSION:
        raise SystemExit(
            f"tests/emulators/moto_run.py fixes FakeKey.etag of moto {MOTO_VERSION}, found {moto.__version__}: "
            "check that version's moto/s3/models.py and update the fix (or drop it where moto fixed the race)"
        )
    models.FakeKey.etag = property(_etag)  # type: ignore[assignment,method-assign]
    from moto.server import main as serve

    serve(sys.argv[1:])


if __name__ == "__main__":
    main()
