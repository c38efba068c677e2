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
    The same protocol as the bucket store, on Firestore's own preconditions:
    a claim is ``create`` (fails if the document exists), and every later
    change (complete, release, extend, the take-over of an expired lease) is
    an ``update`` with ``last_update_time`` equal to the update time it read,
    so the write is a compare-and-swap; no transaction is used. Every step is
    safe to repeat: a write whose reply was lost is recognised by the token it
    carries. Leases and expiry use this process's wall clock. Each record
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
from collections.abc import Callable, Mapping
from typing import Any

import google.api_core.exceptions as gexc
import google.auth.exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from portable.driver import Classifier
from portable.driver.idempotency import (
    DEFAULT_MAX_RESULT_BYTES,
    Claim,
    check_claim_args,
    check_result,
    conflict_error,
    lost_error,
    new_token,
)
from portable.errors import ErrorCode, Internal, InvalidURL, PortableError
from portable.resilience import Guard, ResiliencePolicy, attempt_timeout
from portable.urls import ParsedURL

from . import _google

__all__ = ["FirestoreIdempotencyStore"]

GOOGLE_ENDPOINT = "firestore.googleapis.com"
MAX_RESULT_BYTES = 1_000_000

_IN_PROGRESS = "in_progress"
_COMPLETED = "completed"
_RELEASED = "released"
#: compare-and-swap rounds before giving up; each lost round means another writer made progress
_MAX_ROUNDS = 64


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


class FirestoreIdempotencyStore:
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
        self.project = project
        self.collection_path = "/".join(segments)
        self.database = database
        self.timeout = timeout
        self.max_result_bytes = max_result_bytes
        self._clock = clock
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

    def _read(self, doc: Any) -> tuple[dict[str, Any], Any] | None:
        """The record and the update time it was read at, or None if there is none."""

        def read() -> Any:
            return doc.get(retry=None, timeout=self._rpc_timeout())

        snap = self._guard.call("idempotency", f"read record {doc.id}", read)
        if not snap.exists:
            return None
        record = snap.to_dict() or {}
        if record.get("v") != 1:
            raise Internal(f"idempotency record {doc.id} has an unknown format; was it written by something else?")
        return record, snap.update_time

    def _write(self, doc: Any, record: Mapping[str, Any], *, update_time: Any = None) -> bool:
        """Create (update_time None) or compare-and-swap the record; False if another writer won."""

        def create() -> bool:
            try:
                doc.create(dict(record), retry=None, timeout=self._rpc_timeout())
            except gexc.AlreadyExists:
                return False
            return True

        def swap() -> bool:
            try:
                doc.update(
                    dict(record),
                    option=self._client.write_option(last_update_time=update_time),
                    retry=None,
                    timeout=self._rpc_timeout(),
                )
            except (gexc.FailedPrecondition, gexc.NotFound):
                return False
            return True

        what = f"write record {doc.id}"
        return self._guard.call("idempotency", what, create if update_time is None else swap)

    def _new(self, key: str, fp: str, token: str, lease: float, ttl: float) -> dict[str, Any]:
        now = self._clock()
        return {
            "v": 1,
            "key": key[:200],
            "state": _IN_PROGRESS,
            "fp": fp,
            "token": token,
            "lease_until": now + lease,
            "expires_at": now + ttl,
            "expire_at": dt.datetime.fromtimestamp(now + ttl, dt.UTC),
            "ttl": ttl,
            "result": None,
        }

    # -- the protocol -------------------------------------------------------
    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim ``key``; see :class:`portable.idempotency.IdempotencyStore`."""
        check_claim_args(key, fingerprint, lease, ttl)
        doc = self._doc(key)
        token = new_token()
        if self._write(doc, self._new(key, fingerprint, token, lease, ttl)):
            return Claim("acquired", token)
        for _ in range(_MAX_ROUNDS):
            found = self._read(doc)
            if found is None:
                if self._write(doc, self._new(key, fingerprint, token, lease, ttl)):
                    return Claim("acquired", token)
                continue
            record, update_time = found
            now = self._clock()
            if record["token"] == token and record["state"] == _IN_PROGRESS:
                return Claim("acquired", token)  # our own write landed though its reply was lost
            if record["expires_at"] > now and record["state"] != _RELEASED:
                if record["fp"] != fingerprint:
                    raise conflict_error(key)
                if record["state"] == _COMPLETED:
                    result = record["result"]
                    return Claim("completed", None, None if result is None else bytes(result))
                if record["lease_until"] > now:
                    return Claim("in_progress")
            if self._write(doc, self._new(key, fingerprint, token, lease, ttl), update_time=update_time):
                return Claim("acquired", token)
        raise _contended(key)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        """Mark the claim done with ``result``; see :class:`portable.idempotency.IdempotencyStore`."""
        check_result(result, self.max_result_bytes)

        def done(r: dict[str, Any]) -> dict[str, Any]:
            expires = max(r["expires_at"], self._clock() + r["ttl"])
            return {
                **r,
                "state": _COMPLETED,
                "result": result,
                "expires_at": expires,
                "expire_at": dt.datetime.fromtimestamp(expires, dt.UTC),
            }

        self._change(key, token, done, done_state=_COMPLETED)

    def release(self, key: str, token: str) -> None:
        """Give the claim up; see :class:`portable.idempotency.IdempotencyStore`."""
        self._change(key, token, lambda r: {**r, "state": _RELEASED}, done_state=_RELEASED)

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects)."""
        self._change(key, token, lambda r: {**r, "lease_until": self._clock() + lease}, done_state=None)

    def _change(
        self, key: str, token: str, update: Callable[[dict[str, Any]], dict[str, Any]], done_state: str | None
    ) -> None:
        doc = self._doc(key)
        for _ in range(_MAX_ROUNDS):
            found = self._read(doc)
            if found is None or found[0]["token"] != token:
                raise lost_error(key)
            record, update_time = found
            if done_state is not None and record["state"] == done_state:
                return  # this change landed already (a retried call, or a write whose reply was lost)
            if record["state"] != _IN_PROGRESS or record["expires_at"] <= self._clock():
                raise lost_error(key)
            if self._write(doc, update(record), update_time=update_time):
                return
        raise _contended(key)


def _contended(key: str) -> Internal:
    return Internal(
        f"idempotency key {key[:200]!r}: gave up after {_MAX_ROUNDS} compare-and-swap rounds lost to other writers"
    )
