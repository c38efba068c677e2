"""``dynamodb://`` — an idempotency store in a DynamoDB table, as AWS Lambda Powertools keeps one.

URLs:
    ``dynamodb://TABLE`` or ``dynamodb://TABLE/PREFIX``: records live in the
    table ``TABLE`` (partition key ``id``, a string); with a prefix, every
    record's id starts with ``PREFIX/``, so several services can share a
    table. Open it with :func:`portable.idempotency.open_store` (the scheme
    is registered in the entry-point group ``portable.idempotency``) or
    build :class:`DynamoDBStore` directly. :meth:`DynamoDBStore.create_table`
    creates a table (on-demand billing) with TTL on ``expiration``.

Options:
    ``region``, ``endpoint_url``, ``profile``, ``timeout``: as every AWS URL.
    ``max_result_bytes`` (int): the largest result kept. Defaults to 64 KiB;
    at most 350,000 (an item is at most 400 KB).
    ``ttl_attribute`` (str): the table's TTL attribute. Defaults to ``expiration``.

Records:
    ``id`` (``k:<key>``, or ``h:<SHA-256 of key>`` when the key is over 1,024
    UTF-8 bytes: DynamoDB's partition key is at most 2,048), ``fingerprint``,
    ``status`` (``INPROGRESS`` | ``COMPLETED`` | ``RELEASED``), ``token``, ``lease_until``
    and ``expires_at`` (epoch seconds, exact), ``ttl_seconds``, ``result``
    (Binary, absent for None), ``starts`` and ``failures`` (the counts of
    :class:`portable.driver.idempotency.Claim`; absent on items written
    before them: 1 and 0), and the TTL attribute (whole epoch seconds)
    with which DynamoDB deletes expired items, within a day or two.

How it works:
    Every change is one conditional write, so it is atomic per key across
    processes and machines. ``claim`` is a PutItem with
    ``attribute_not_exists(id) OR expires_at <= now`` (a new key or an
    expired record); when the condition fails, the item that made it fail
    comes back with the error (ReturnValuesOnConditionCheckFailure) and says
    ``completed`` (with the result), ``in_progress`` or IdempotencyConflict,
    or that it may be taken over (released, or a lease whose claimer
    crashed): then an UpdateItem conditional on the token, status and lease
    it read takes it over and counts one more start. ``complete``,
    ``release`` (which keeps the item, one failure more), ``forget`` and
    ``extend`` are conditional on the claim's token. Expiry is
    checked in every condition, because DynamoDB's TTL deletion is lazy. The
    conditions are the rules of :mod:`portable.driver.idempotency`, and an
    item that failed one is read through them (``claim_outcome``,
    ``change_needed``).

Retries:
    botocore's retries are off (``retries={"total_max_attempts": 1}``); every
    call runs under a :class:`portable.resilience.Guard` (the store's
    ``policy``), and a retried write recognises its own earlier success by
    its token, so a lost reply neither loses a claim nor completes twice.

As:
    ``botocore.client.BaseClient``: the boto3 DynamoDB client (``as_()``).

Known differences:
    * moto (the test emulator) checks conditions and writes without a lock on
      its threaded server, so racing claims can both acquire there; DynamoDB
      serialises writes to an item.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

from portable.driver import idempotency as idem
from portable.driver.idempotency import Claim, IdempotencyRecord
from portable.errors import InvalidURL, PortableError
from portable.resilience import Guard, ResiliencePolicy
from portable.urls import ParsedURL

from ._aws import (
    AWSClassifier,
    AWSOptions,
    BotoClientOwner,
    aws_error_code,
    boto_config,
    new_client,
)

__all__ = ["DynamoDBStore"]

_TABLE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_ATTRIBUTE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_IN_PROGRESS = "INPROGRESS"
_COMPLETED = "COMPLETED"
_RELEASED = "RELEASED"
_STATES: dict[str, idem.RecordState] = {_COMPLETED: idem.COMPLETED, _RELEASED: idem.RELEASED}
_MAX_RESULT = 350_000
_RACE_ROUNDS = 5


def _n(value: float) -> dict[str, str]:
    return {"N": repr(float(value))}


def _record(key: str, item: dict[str, Any]) -> IdempotencyRecord:
    """An item of the table as the shared record."""
    result = item.get("result")
    return {
        "v": 1,
        "key": key[:200],
        "state": _STATES.get(item["status"]["S"], idem.IN_PROGRESS),
        "fp": item["fingerprint"]["S"],
        "token": item["token"]["S"],
        "lease_until": float(item["lease_until"]["N"]),
        "expires_at": float(item["expires_at"]["N"]),
        "ttl": float(item["ttl_seconds"]["N"]),
        "result": None if result is None else bytes(result["B"]),
        "starts": int(item.get("starts", {}).get("N", "1")),
        "failures": int(item.get("failures", {}).get("N", "0")),
    }


class DynamoDBStore(BotoClientOwner, AWSClassifier):
    """Idempotency records in one DynamoDB table (see the module docstring).

    Args:
        table: the table name.
        prefix: a namespace inside the table. Defaults to none.
        options: region, endpoint, profile, timeout.
        max_result_bytes: the largest result kept. Defaults to 64 KiB.
        ttl_attribute: the attribute DynamoDB's TTL reads. Defaults to ``expiration``.
        policy: the retry and breaker policy of every call. Defaults to portable's.
        clock: wall-clock seconds; tests pass a fake one.
    """

    scheme = "dynamodb"

    def __init__(
        self,
        table: str,
        prefix: str = "",
        *,
        options: AWSOptions | None = None,
        max_result_bytes: int = idem.DEFAULT_MAX_RESULT_BYTES,
        ttl_attribute: str = "expiration",
        policy: ResiliencePolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _TABLE.match(table):
            raise InvalidURL(f"{table!r} is not a DynamoDB table name: 3-255 of A-Z, a-z, 0-9, '_', '-', '.'")
        if not _ATTRIBUTE.match(ttl_attribute):
            raise InvalidURL(f"ttl_attribute={ttl_attribute!r} must be a plain attribute name")
        if not 0 <= max_result_bytes <= _MAX_RESULT:
            raise InvalidURL(f"max_result_bytes must be from 0 to {_MAX_RESULT:,}, got {max_result_bytes}")
        self.table = table
        self.prefix = prefix.strip("/")
        self.options = options or AWSOptions()
        self.max_result_bytes = max_result_bytes
        self.ttl_attribute = ttl_attribute
        self.endpoint = self.options.describe("dynamodb")
        self.client: Any = new_client("dynamodb", self.options, boto_config(self.options, pool=32))
        self._clock = clock
        self._guard = Guard(self.scheme, self.endpoint, self, policy)

    @classmethod
    def from_url(cls, url: ParsedURL) -> DynamoDBStore:
        if not url.host:
            raise InvalidURL(f"{url} names no table: write dynamodb://TABLE[/PREFIX]")
        options = AWSOptions.take(url)
        limit = url.take("max_result_bytes", int, idem.DEFAULT_MAX_RESULT_BYTES)
        ttl_attribute = url.take_str("ttl_attribute") or "expiration"
        url.done()
        return cls(url.host, url.path, options=options, max_result_bytes=limit, ttl_attribute=ttl_attribute)

    def __repr__(self) -> str:
        return f"DynamoDBStore(table={self.table!r}, prefix={self.prefix!r}, endpoint={self.endpoint!r})"

    # -- records ---------------------------------------------------------
    def _id(self, key: str) -> str:
        raw = key.encode("utf-8")
        body = f"k:{key}" if len(raw) <= 1024 else "h:" + hashlib.sha256(raw).hexdigest()
        return f"{self.prefix}/{body}" if self.prefix else body

    def _get(self, item_id: str) -> dict[str, Any] | None:
        resp = self.client.get_item(TableName=self.table, Key={"id": {"S": item_id}}, ConsistentRead=True)
        item = resp.get("Item")
        return dict(item) if item else None

    def _failed_item(self, exc: BaseException, item_id: str) -> dict[str, Any] | None:
        """The item that failed a condition: from the error, else read again."""
        item = getattr(exc, "response", {}).get("Item")
        return dict(item) if item else self._get(item_id)

    @staticmethod
    def _conditional_failure(exc: BaseException) -> bool:
        return aws_error_code(exc)[0] == "ConditionalCheckFailedException"

    # -- the protocol ------------------------------------------------------
    def claim(self, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        idem.check_claim_args(key, fingerprint, lease, ttl)
        token = idem.new_token()
        claim: Claim = self._guard.call("write", f"claim {key[:80]}", self._claim, key, fingerprint, lease, ttl, token)
        return claim

    def _claim(self, key: str, fingerprint: str, lease: float, ttl: float, token: str) -> Claim:
        item_id = self._id(key)
        for _ in range(_RACE_ROUNDS):
            now = self._clock()
            expires = now + ttl
            item = {
                "id": {"S": item_id},
                "fingerprint": {"S": fingerprint},
                "status": {"S": _IN_PROGRESS},
                "token": {"S": token},
                "lease_until": _n(now + lease),
                "expires_at": _n(expires),
                "ttl_seconds": _n(ttl),
                "starts": {"N": "1"},
                "failures": {"N": "0"},
                self.ttl_attribute: {"N": str(int(expires) + 1)},
            }
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(id) OR expires_at <= :now",
                    ExpressionAttributeValues={":now": _n(now)},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except Exception as exc:
                if not self._conditional_failure(exc):
                    raise
                found = self._failed_item(exc, item_id)
            else:
                return Claim("acquired", token, None, lease, 1, 0)
            record = None if found is None else _record(key, found)
            outcome = idem.claim_outcome(record, key, fingerprint, token, now)
            if outcome is not None:
                return outcome
            if record is not None and found is not None:
                taken = self._take_over(item_id, found, record, fingerprint, token, lease, ttl, now)
                if taken is not None:
                    return taken
            # it changed in between: claim again
        return Claim("in_progress")

    def _take_over(
        self,
        item_id: str,
        found: dict[str, Any],
        record: IdempotencyRecord,
        fingerprint: str,
        token: str,
        lease: float,
        ttl: float,
        now: float,
    ) -> Claim | None:
        """Take a released or lapsed claim over, if the item is still as read; None if it changed."""
        starts, failures = idem.next_counts(record, now)
        expires = now + ttl
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"id": {"S": item_id}},
                UpdateExpression=(
                    "SET fingerprint = :fp, #s = :running, #tk = :token, lease_until = :until, "
                    "expires_at = :exp, ttl_seconds = :ttl, starts = :starts, failures = :failures, "
                    "#ttl = :ttl_n REMOVE #r"
                ),
                ConditionExpression="#tk = :old_token AND #s = :old_status AND lease_until = :old_lease",
                ExpressionAttributeNames={"#s": "status", "#tk": "token", "#ttl": self.ttl_attribute, "#r": "result"},
                ExpressionAttributeValues={
                    ":fp": {"S": fingerprint},
                    ":running": {"S": _IN_PROGRESS},
                    ":token": {"S": token},
                    ":until": _n(now + lease),
                    ":exp": _n(expires),
                    ":ttl": _n(ttl),
                    ":starts": {"N": str(starts)},
                    ":failures": {"N": str(failures)},
                    ":ttl_n": {"N": str(int(expires) + 1)},
                    ":old_token": found["token"],
                    ":old_status": found["status"],
                    ":old_lease": found["lease_until"],
                },
            )
        except Exception as exc:
            if not self._conditional_failure(exc):
                raise
            return None
        return Claim("acquired", token, None, lease, starts, failures)

    def complete(self, key: str, token: str, result: bytes | None) -> None:
        idem.check_result(result, self.max_result_bytes)
        self._guard.call("write", f"complete {key[:80]}", self._complete, key, token, result)

    def _complete(self, key: str, token: str, result: bytes | None) -> None:
        item_id = self._id(key)
        now = self._clock()
        found = self._get(item_id)
        current = None if found is None else _record(key, found)
        if not idem.change_needed(current, key, token, idem.COMPLETED, now):
            return  # a retried complete(): the first one landed
        expires = idem.completed_record(current, result, now)["expires_at"]
        update = f"SET #s = :done, expires_at = :exp, #ttl = :ttl_n{', #r = :r' if result is not None else ''}"
        values: dict[str, Any] = {
            ":done": {"S": _COMPLETED},
            ":exp": _n(expires),
            ":ttl_n": {"N": str(int(expires) + 1)},
            ":token": {"S": token},
            ":running": {"S": _IN_PROGRESS},
            ":now": _n(now),
        }
        names = {"#s": "status", "#ttl": self.ttl_attribute}
        if result is not None:
            values[":r"] = {"B": result}
            names["#r"] = "result"
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"id": {"S": item_id}},
                UpdateExpression=update,
                ConditionExpression="#tk = :token AND #s = :running AND expires_at > :now",
                ExpressionAttributeNames={**names, "#tk": "token"},
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if not self._conditional_failure(exc):
                raise
            failed = self._failed_item(exc, item_id)
            if failed is not None and failed["token"]["S"] == token and failed["status"]["S"] == _COMPLETED:
                return
            raise idem.lost_error(key) from None

    def release(self, key: str, token: str) -> None:
        self._guard.call("write", f"release {key[:80]}", self._release, key, token)

    def _release(self, key: str, token: str) -> None:
        item_id = self._id(key)
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"id": {"S": item_id}},
                UpdateExpression="SET #s = :released, failures = if_not_exists(failures, :zero) + :one",
                ConditionExpression="#tk = :token AND #s = :running AND expires_at > :now",
                ExpressionAttributeNames={"#tk": "token", "#s": "status"},
                ExpressionAttributeValues={
                    ":token": {"S": token},
                    ":running": {"S": _IN_PROGRESS},
                    ":released": {"S": _RELEASED},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                    ":now": _n(self._clock()),
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if not self._conditional_failure(exc):
                raise
            failed = self._failed_item(exc, item_id)
            if failed is None:
                return  # gone: nothing left to give up (the record expired and was deleted)
            if failed["token"]["S"] == token and failed["status"]["S"] == _RELEASED:
                return  # released already (a retried release whose reply was lost)
            raise idem.lost_error(key) from None

    def forget(self, key: str, token: str) -> None:
        """Give the claim up and drop its counts (the item): the next claim is a first start.

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._guard.call("write", f"forget {key[:80]}", self._forget, key, token)

    def _forget(self, key: str, token: str) -> None:
        item_id = self._id(key)
        try:
            self.client.delete_item(
                TableName=self.table,
                Key={"id": {"S": item_id}},
                ConditionExpression="#tk = :token AND #s <> :done",
                ExpressionAttributeNames={"#tk": "token", "#s": "status"},
                ExpressionAttributeValues={":token": {"S": token}, ":done": {"S": _COMPLETED}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if not self._conditional_failure(exc):
                raise
            if self._failed_item(exc, item_id) is None:
                return  # gone: forgotten already (a retried call whose reply was lost)
            raise idem.lost_error(key) from None

    def extend(self, key: str, token: str, lease: float) -> None:
        """Push the lease of a held claim ``lease`` seconds from now (long effects).

        Raises:
            PreconditionFailed: the claim was lost.
        """
        self._guard.call("write", f"extend {key[:80]}", self._extend, key, token, lease)

    def _extend(self, key: str, token: str, lease: float) -> None:
        now = self._clock()
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"id": {"S": self._id(key)}},
                UpdateExpression="SET lease_until = :until",
                ConditionExpression="#tk = :token AND #s = :running AND expires_at > :now",
                ExpressionAttributeNames={"#tk": "token", "#s": "status"},
                ExpressionAttributeValues={
                    ":until": _n(now + lease),
                    ":token": {"S": token},
                    ":running": {"S": _IN_PROGRESS},
                    ":now": _n(now),
                },
            )
        except Exception as exc:
            if not self._conditional_failure(exc):
                raise
            raise idem.lost_error(key) from None

    # -- setup and escape hatches ----------------------------------------
    def create_table(self, *, wait: float = 60.0) -> None:
        """Create the table (on-demand billing, partition key ``id``) and turn TTL on.

        An existing table is left as it is; TTL is turned on either way.
        """
        def create() -> None:
            try:
                self.client.create_table(
                    TableName=self.table,
                    AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                    BillingMode="PAY_PER_REQUEST",
                )
            except Exception as exc:
                if aws_error_code(exc)[0] != "ResourceInUseException":
                    raise
            waiter = self.client.get_waiter("table_exists")
            waiter.wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": max(1, int(wait))})
            try:
                self.client.update_time_to_live(
                    TableName=self.table,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": self.ttl_attribute},
                )
            except Exception as exc:
                if "already enabled" not in str(exc).lower():
                    raise

        self._guard.call("admin", f"create table {self.table}", create)

    def code_of(self, exc: BaseException) -> Any:
        if isinstance(exc, PortableError):
            return exc.code
        return super().code_of(exc)
