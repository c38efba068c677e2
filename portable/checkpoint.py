"""Checkpoints that let a job resume where it stopped, on any portable bucket.

A launcher passes ``JobSpec.checkpoint_url`` to the job as
``PORTABLE_CHECKPOINT_URL``. The job loads its last state when it starts and
saves as it goes; when it is preempted (a spot VM reclaimed) or fails and is
retried, the next attempt resumes from the last save::

    import portable.checkpoint

    ckpt = portable.checkpoint.from_env()
    state = ckpt.load(default={"i": 0, "total": 0})
    for i in range(state["i"], 1000):
        state["total"] += i
        state["i"] = i + 1
        if state["i"] % 100 == 0:
            ckpt.save(state)

The URL is a bucket URL (``file:///scratch/ckpt/run-7``,
``s3://bucket/ckpt/run-7``); the checkpoint is the object ``checkpoint`` in
it (``key=`` picks another). A state is a JSON value, or ``bytes`` stored
as they are.

Guarantees:
    * A save is atomic (one ``Bucket.put``): a reader sees the previous
      checkpoint or the new one, never a torn one.
    * Every save carries a step, one more than the last (or the ``step=``
      given, which must be larger). A save is conditional on the etag of
      the checkpoint this writer loaded or saved last, so a stale writer
      (an attempt that was presumed dead but still runs) cannot overwrite a
      newer checkpoint: its save raises PreconditionFailed, and it should
      stop.
    * ``load`` reads the object's step from its metadata and its body in
      two requests and checks they agree, so the etag it keeps belongs to
      the state it returns.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from .driver.redaction import redact
from .errors import AlreadyExists, ConfigError, InvalidArgument, NotFound, PreconditionFailed
from .storage import Bucket, open_bucket

__all__ = ["Checkpoint", "ENV_VAR", "from_env", "open_checkpoint"]

#: The environment variable through which a launcher passes the checkpoint URL.
ENV_VAR = "PORTABLE_CHECKPOINT_URL"

_MISSING: Any = object()
_STEP_META = "portable-step"
_READ_TRIES = 8  # with backoff from 10 ms: about 2.5 s in all


class Checkpoint:
    """The checkpoint of one job.

    Attributes:
        step: the step of the checkpoint last loaded or saved; 0 before any.
        key: the object key in the bucket.
    """

    def __init__(self, bucket: Bucket, key: str = "checkpoint", *, url: str = "") -> None:
        self._bucket = bucket
        self.key = key
        self.url = url or bucket.url
        self.step = 0
        self._etag: str | None = None
        self._loaded = False

    def __repr__(self) -> str:
        return f"Checkpoint({redact(self.url)!r}, key={self.key!r}, step={self.step})"

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def bucket(self) -> Bucket:
        return self._bucket

    def load(self, default: Any = None) -> Any:
        """Return the last saved state, or ``default`` if there is none yet.

        Sets :attr:`step` and remembers the version, so that the next
        :meth:`save` replaces exactly this one.
        """
        for attempt in range(_READ_TRIES):
            try:
                info = self._bucket.head(self.key)
                data = self._bucket.get(self.key)
            except NotFound:
                self.step, self._etag, self._loaded = 0, None, True
                return default
            header, body = _split(data, self.url)
            if str(header["step"]) == info.metadata.get(_STEP_META):
                self.step, self._etag, self._loaded = int(header["step"]), info.etag, True
                return body
            time.sleep(0.01 * 2**attempt)  # a save landed between the two reads; read again
        raise PreconditionFailed(f"checkpoint {redact(self.url)} changed on every read; is another writer busy?")

    def save(self, state: Any, *, step: int | None = None) -> int:
        """Store ``state`` atomically as the next step; return that step.

        Args:
            state: a JSON value, or ``bytes`` kept as they are.
            step: the step to record; must be larger than :attr:`step`.
                Defaults to :attr:`step` + 1.

        Raises:
            PreconditionFailed: another writer saved since this one loaded or
                saved: this writer is stale and should stop.
            InvalidArgument: ``state`` is not JSON-serialisable, or ``step``
                does not increase.
        """
        new_step = self.step + 1 if step is None else step
        if isinstance(new_step, bool) or not isinstance(new_step, int) or new_step <= self.step:
            raise InvalidArgument(f"step must be an int larger than the last ({self.step}), got {step!r}")
        if isinstance(state, bytes | bytearray | memoryview):
            kind, body = "bytes", bytes(state)
        else:
            kind = "json"
            try:
                body = json.dumps(state, separators=(",", ":")).encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"a checkpoint state must be JSON-serialisable or bytes: {exc}") from None
        header = json.dumps({"portable_checkpoint": 1, "step": new_step, "format": kind, "saved": time.time()})
        data = header.encode("utf-8") + b"\n" + body
        meta = {_STEP_META: str(new_step)}
        try:
            if self._etag is None:
                etag = self._bucket.put(self.key, data, metadata=meta, if_none_match="*")
            else:
                etag = self._bucket.put(self.key, data, metadata=meta, if_match=self._etag)
        except (AlreadyExists, PreconditionFailed, NotFound) as exc:
            raise PreconditionFailed(
                f"checkpoint {redact(self.url)} was saved by another writer since this one "
                f"{'loaded' if self._loaded else 'started'} it (at step {self.step}); this writer is stale: "
                "stop, or load() again to continue from the newer state"
            ) from exc
        if etag is None:
            etag = self._bucket.head(self.key).etag
        self.step, self._etag, self._loaded = new_step, etag, True
        return new_step

    def clear(self) -> None:
        """Delete the checkpoint (for example once the job's result is safe)."""
        self._bucket.delete(self.key)
        self.step, self._etag = 0, None

    def close(self) -> None:
        self._bucket.close()


def _split(data: bytes, url: str) -> tuple[dict[str, Any], Any]:
    head, sep, body = data.partition(b"\n")
    try:
        header = json.loads(head)
        if not sep or not isinstance(header, dict) or header.get("portable_checkpoint") != 1:
            raise ValueError("no checkpoint header")
        if header.get("format") == "bytes":
            return header, body
        return header, json.loads(body)
    except ValueError:
        raise InvalidArgument(
            f"{redact(url)} holds an object that is not a portable checkpoint; point checkpoint_url elsewhere"
        ) from None


def open_checkpoint(url: str, *, key: str = "checkpoint") -> Checkpoint:
    """Open the checkpoint ``key`` in the bucket at ``url``."""
    return Checkpoint(open_bucket(url), key, url=url)


def from_env(default_url: str | None = None, *, key: str = "checkpoint") -> Checkpoint:
    """Open the checkpoint the launcher named in ``PORTABLE_CHECKPOINT_URL``.

    Args:
        default_url: used when the variable is unset (a job run by hand).

    Raises:
        ConfigError: the variable is unset and no ``default_url`` was given.
    """
    url = os.environ.get(ENV_VAR) or default_url
    if not url:
        raise ConfigError(
            f"{ENV_VAR} is not set: submit the job with JobSpec(checkpoint_url=...) "
            "or pass from_env(default_url=...)"
        )
    return open_checkpoint(url, key=key)
