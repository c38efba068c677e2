"""``firestore://`` — idempotency records in Cloud Firestore (native mode).

URLs:
    ``firestore://PROJECT/COLLECTION`` (or a nested collection,
    ``firestore://PROJECT/tenants/acme/idempotency``): one document per
    idempotency key in COLLECTION. Open it with
    ``portable.idempotency.open_store(url)`` (entry point ``firestore`` in the
    group ``portable.idempotency``) or construct
    :class:`FirestoreIdempotencyStore` directly.

Options:
    ``database`` (str): the Firestore database. Defaults to ``(default)``.
    ``endpoint`` (str): ``host:port`` of an emulator, reached without TLS or
        credentials. Defaults to ``$FIRESTORE_EMULATOR_HOST``, else Google's
        endpoint with the application-default credentials.
    ``timeout`` (float): seconds each RPC may take. Defaults to 30.
    ``max_result_bytes`` (int): the largest stored result, up to 1,000,000
        (a document holds at most 1 MiB). Defaults to 64 KiB.

Names:
    Collection path segments are non-empty, at most 1,500 bytes, without
    ``/``, not ``.`` or ``..`` and not ``__...__``; the project is a GCP
    project id. A bad URL raises InvalidURL before any request. Keys are
    opaque: the document id is a 128-bit BLAKE2b hash of the key, so any
    key of up to 1,024 characters works.

How:
    The same protocol as the bucket store
    (:class:`portable.driver.idempotency.CompareAndSwapStore`), on Firestore's
    own preconditions: a claim is ``create`` (fails if the document exists),
    and every later change (complete, release, extend, the take-over of an
    expired lease) is an ``update`` with ``last_update_time`` equal to the
    update time it read (or that its own claim wrote), so the write is a
    compare-and-swap; no transaction is used. Every step is safe to repeat: a
    write whose reply was lost is recognised by the token it carries. A
    document holds the fields of
    :class:`~portable.driver.idempotency.IdempotencyRecord` (with the claim
    counts ``starts`` and ``failures``; a document written before them reads as 1 and 0). Leases and expiry use this process's wall clock. Each record
    also holds ``expire_at`` (a timestamp): give the collection a Firestore
    TTL policy on that field and expired records are deleted for you.

As:
    A store is not a driver and has no ``as_()``; :attr:`FirestoreIdempotencyStore.client`
    is the ``google.cloud.firestore.Client`` it uses.

Retries:
    Every RPC passes ``retry=None`` and runs under a
    :class:`portable.resilience.Guard` (breaker ``firestore:<endpoint>:idempotency``),
    so google.api_core never retries and each RPC has one retry budget.
    Errors are portable errors, the google one as ``__cause__``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import time
from collections.abc import Callable
from typing import Any

import google.api_core.exceptions as gexc
import google.auth.exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from portable.driver import Classifier
from portable.driver.idempotency import (
    DEFAULT_MAX_RESULT_BYTES,
    CompareAndSwapStore,
    IdempotencyRecord,
    read_record,
)
from portable.errors import ErrorCode, InvalidURL, PortableError
from portable.resilience import Guard, ResiliencePolicy, attempt_timeout
from portable.urls import ParsedURL

from . import _google

__all__ = ["FirestoreIdempotencyStore"]

GOOGLE_ENDPOINT = "firestore.googleapis.com"
MAX_RESULT_BYTES = 1_000_000


class _Errors(Classifier):
    def code_of(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, PortableError):
            return exc.code
        code = _google.code_of(exc)
        return code if code is not None else super().code_of(exc)


def _check_segment(segment: str, url: object) -> str:
    if (
        not segment
        or len(segment.encode("utf-8")) > 1500
        or segment in (".", "..")
        or (segment.startswith("__") and segment.endswith("__"))
    ):
        raise InvalidURL(
            f"{segment!r} in {url} is not a Firestore collection or document id: use 1-1,500 bytes, "
            "not '.', '..' or '__name__'"
        )
    return segment


class FirestoreIdempotencyStore(CompareAndSwapStore[Any, Any]):
    """Idempotency records as Firestore documents, changed only by create and compare-and-swap.

    Args:
        project: the GCP project id.
        collection: the collection path (``"idempotency"`` or ``"a/b/c"``).
        database: the database id. Defaults to ``"(default)"``.
        endpoint: ``host:port`` of an emulator. Defaults to ``$FIRESTORE_EMULATOR_HOST``.
        timeout: seconds per RPC. Defaults to 30.
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        clock: wall-clock seconds; tests pass a fake one.
        policy: the retry and breaker policy of every RPC. Defaults to portable's.
    """

    def __init__(
        self,
        project: str,
        collection: str,
        *,
        database: str = "(default)",
        endpoint: str | None = None,
        timeout: float = 30.0,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        clock: Callable[[], float] = time.time,
        policy: ResiliencePolicy | None = None,
    ) -> None:
        _google.check_project(project, f"firestore://{project}/{collection}")
        segments = collection.strip("/").split("/")
        if len(segments) % 2 != 1:
            raise InvalidURL(
                f"{collection!r} names a document, not a collection: a collection path has an odd "
                "number of segments (idempotency, or tenants/acme/idempotency)"
            )
        for segment in segments:
            _check_segment(segment, f"firestore://{project}/{collection}")
        if not 1 <= max_result_bytes <= MAX_RESULT_BYTES:
            raise InvalidURL(f"max_result_bytes must be from 1 to {MAX_RESULT_BYTES:,} (a document is at most 1 MiB)")
        super().__init__(max_result_bytes=max_result_bytes, clock=clock)
        self.project = project
        self.collection_path = "/".join(segments)
        self.database = database
        self.timeout = timeout
        emulator = endpoint or os.environ.get("FIRESTORE_EMULATOR_HOST") or None
        self.endpoint = emulator or GOOGLE_ENDPOINT
        if emulator:
            self._client = firestore.Client(project=project, database=database, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
            # google-cloud-firestore's own emulator path (an insecure channel and the
            # emulator's "owner" token) keys on this attribute, set from the environment.
            self._client._emulator_host = emulator
        else:
            try:
                self._client = firestore.Client(project=project, database=database)
            except google.auth.exceptions.DefaultCredentialsError as exc:
                raise _google.no_credentials("firestore", "endpoint") from exc
        self._collection = self._client.collection(*segments)
        self._guard = Guard("firestore", self.endpoint, _Errors(), policy)

    @classmethod
    def from_url(cls, url: ParsedURL) -> FirestoreIdempotencyStore:
        """Open ``firestore://PROJECT/COLLECTION?database=&endpoint=&timeout=&max_result_bytes=``."""
        database = url.take_str("database", "(default)") or "(default)"
        endpoint = url.take_str("endpoint")
        timeout = url.take("timeout", float, 30.0)
        limit = url.take("max_result_bytes", int, DEFAULT_MAX_RESULT_BYTES)
        url.done()
        if not math.isfinite(timeout) or timeout <= 0:
            raise InvalidURL(f"timeout in {url} must be a number of seconds > 0")
        collection = url.path.strip("/")
        if not collection:
            raise InvalidURL(f"{url} names no collection: write firestore://PROJECT/COLLECTION")
        return cls(
            url.host, collection, database=database, endpoint=endpoint, timeout=timeout, max_result_bytes=limit
        )

    def __repr__(self) -> str:
        return f"FirestoreIdempotencyStore('firestore://{self.project}/{self.collection_path}')"

    @property
    def client(self) -> firestore.Client:
        """The ``google.cloud.firestore.Client`` underneath (for what the protocol does not cover)."""
        return self._client

    def close(self) -> None:
        """Close the client's channel."""
        self._client.close()  # type: ignore[no-untyped-call]

    # -- records ----------------------------------------------------------
    def _rpc_timeout(self) -> float:
        left = attempt_timeout()
        return self.timeout if left is None else max(0.001, min(self.timeout, left))

    def _doc(self, key: str) -> Any:
        return self._collection.document(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest())

    def _read(self, doc: Any) -> tuple[IdempotencyRecord, Any] | None:
        """The record and the update time it was read at, or None if there is none."""

        def read() -> Any:
            return doc.get(retry=None, timeout=self._rpc_timeout())

        snap = self._guard.call("idempotency", f"read record {doc.id}", read)
        if not snap.exists:
            return None
        record = read_record(snap.to_dict(), doc.id)
        if record["result"] is not None:
            record["result"] = bytes(record["result"])
        return record, snap.update_time

    def _write(self, doc: Any, record: IdempotencyRecord, update_time: Any = None) -> Any:
        """Create (``update_time`` None) or compare-and-swap the record on ``update_time``.

        The document also gets ``expire_at``, the timestamp a TTL policy reads.

        Returns:
            The update time written, or None if another writer won.
        """
        fields = {**record, "expire_at": dt.datetime.fromtimestamp(record["expires_at"], dt.UTC)}

        def create() -> Any:
            try:
                return doc.create(fields, retry=None, timeout=self._rpc_timeout()).update_time
            except gexc.AlreadyExists:
                return None

        def swap() -> Any:
            try:
                written = doc.update(
                    fields,
                    option=self._client.write_option(last_update_time=update_time),
                    retry=None,
                    timeout=self._rpc_timeout(),
                )
            except (gexc.FailedPrecondition, gexc.NotFound):
                return None
            return written.update_time

        what = f"write record {doc.id}"
        return self._guard.call("idempotency", what, create if update_time is None else swap)
