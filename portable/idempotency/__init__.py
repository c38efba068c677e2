"""Idempotency keys: run an effect once, however often it is asked for.

A caller names an effect with a key (an order id, a message's idempotency
key, a job's name) and *claims* it in a store before running it:

* the first claim is ``"acquired"``: the record is IN_PROGRESS with a lease
  (the claimer's exclusive right to run) and a fingerprint of the payload;
* the claimer runs the effect and calls :meth:`IdempotencyStore.complete`
  with the result (bounded in size); the record is COMPLETED until it expires;
* a later claim of a COMPLETED key is ``"completed"`` and carries the stored
  result, so the caller returns it instead of running the effect again;
* a claim while the lease runs is ``"in_progress"`` (the caller raises
  :class:`~portable.errors.InProgress` or waits, see :func:`run_once`);
* a claim after the lease expired (the claimer crashed) is ``"acquired"``
  again with a new token: the crashed claimer's work is retried;
* a claim whose fingerprint differs from the record's raises
  :class:`~portable.errors.IdempotencyConflict`: the key was reused for a
  different payload, which is a bug in the caller;
* if the effect fails, :meth:`IdempotencyStore.release` gives the claim up so
  the next caller may run it.

Every claim says when an in-progress claim's lease ends
(:attr:`Claim.lease_remaining`) and how often the key was taken to run
(:attr:`Claim.starts`, :attr:`Claim.failures`): a start that neither completed
nor released is a claimer that crashed. ``Subscription.run`` dead-letters on
these counts; ``forget(key, token)`` gives a claim up and clears them.

Effects that hold after a crash: ``SqliteStore.run_and_complete`` commits an
effect on the store's database with the claim's completion
(:class:`SqliteTransaction`), and ``BucketStore.run_and_complete`` makes each
object put of an effect once per key (:class:`BucketEffects`);
``store.transactional(handler)`` gives ``Subscription.run`` a handler of either
(:class:`TransactionalHandler`). docs/messaging.md, "Exactly once: what holds
after a crash", says what is guaranteed and what is not.

``complete`` and ``release`` take the claim's token; when the lease was lost
(it expired and another caller took the key over) they raise
:class:`~portable.errors.PreconditionFailed`.

Stores (:func:`open_store` picks one by URL, through the scheme registry of
:mod:`portable.urls`, like every other domain):

=============================  ================================================
URL                            store
=============================  ================================================
``mem://`` ``mem://N``         :class:`MemoryStore` (one process; ``N`` shares)
``sqlite://PATH``              :class:`SqliteStore` (processes of one machine)
any bucket URL                 :class:`BucketStore`: ``file://``, ``s3://``,
                               ``gs://``, ``az://``, ... with no extra database
``redis://`` ``rediss://``     ``portable_redis.RedisStore``
``unix://``                    (``pip install 'portable-cloud[redis]'``)
``dynamodb://TABLE``           ``portable_aws.dynamodb.DynamoDBStore``
                               (``portable-cloud[aws]``)
``firestore://PROJECT/COLL``   ``portable_gcp.firestore.FirestoreIdempotencyStore``
                               (``portable-cloud[gcp]``)
=============================  ================================================

Third-party stores register a scheme in the entry-point group
``portable.idempotency`` (:data:`GROUP`); the entry point names a class with
a ``from_url(parsed: ParsedURL)`` class method that returns an
:class:`IdempotencyStore`. Entry points win over the built-in schemes. What a
store is built from (the record, its rules, the compare-and-swap protocol) is
public in :mod:`portable.driver.idempotency`.

From coroutines: :func:`arun_once` and ``@idempotent`` on an ``async def``
take a sync store or a :class:`portable.aio.AsyncIdempotencyStore`
(``portable.aio.open_store``); a cancelled coroutine leaves its key free,
never IN_PROGRESS (docs/idempotency.md).

Times: leases and expiry use the wall clock (``time.time``) because records
are shared between processes and machines; keep clocks in sync (NTP) and
leases well above the clock skew.
"""

from __future__ import annotations

from ..driver.idempotency import (
    DEFAULT_LEASE,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_TTL,
    Claim,
    ClaimStatus,
    IdempotencyStore,
    TransactionalHandler,
    fingerprint,
    new_token,
)
from ._batch import claim_many, complete_many, unclaim
from ._bucket import BucketEffects, BucketStore
from ._memory import MemoryStore
from ._open import GROUP, open_store
from ._run_once import arun_once, idempotent, run_once
from ._sqlite import SqliteStore, SqliteTransaction

__all__ = [
    "BucketEffects",
    "BucketStore",
    "Claim",
    "ClaimStatus",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TTL",
    "GROUP",
    "IdempotencyStore",
    "MemoryStore",
    "SqliteStore",
    "SqliteTransaction",
    "TransactionalHandler",
    "arun_once",
    "claim_many",
    "complete_many",
    "fingerprint",
    "idempotent",
    "new_token",
    "open_store",
    "run_once",
    "unclaim",
]
