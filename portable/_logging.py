"""Mask secrets in the log records of the SDKs that portable's drivers use.

At DEBUG, SDKs log what they are given: botocore logs endpoints and request
dicts, kafka-python logs its whole configuration (``sasl_plain_password``
included), azure-core and urllib3 log request URLs. :func:`install_secret_masking`
(called once, when :func:`portable.urls.open_driver` opens the first driver)
makes every record of the loggers in :data:`MASKED_LOGGERS`, and of their
children, pass through :class:`SecretMaskingFilter` as it is created, before
any handler or filter sees it: its message is formatted (``msg % args``) and
put through :func:`portable.driver.redaction.redact`, ``args`` is emptied, and
the exception and stack text it carries are masked too.

Why at creation and not as a logger filter: a filter on the logger
``botocore`` is not consulted for records of ``botocore.endpoint``, and a
filter on a handler only helps the handlers portable knows of. The record
factory (:func:`logging.setLogRecordFactory`) sees every record; portable's
factory calls the one installed before it, and a factory installed later that
calls ``logging.getLogRecordFactory()``'s previous value keeps it in the chain.

:class:`SecretMaskingFilter` can also be attached to a handler of your own, to
mask every record that reaches it, whatever its logger.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .driver.redaction import redact, scrub_exception_chain

__all__ = [
    "DOMAIN_LOGGERS",
    "MASKED_LOGGERS",
    "SecretMaskingFilter",
    "domain_logger",
    "install_secret_masking",
    "is_masked_logger",
]

#: portable's own loggers, one per domain (docs/logging.md): what each says and at which level
DOMAIN_LOGGERS: dict[str, str] = {
    "storage": "portable.storage",
    "messaging": "portable.messaging",
    "compute": "portable.compute",
    "idempotency": "portable.idempotency",
    "resilience": "portable.resilience",
}


def domain_logger(domain: str) -> logging.Logger:
    """The logger of ``domain`` ("storage", "messaging", ...); ``portable.resilience`` for any other."""
    return logging.getLogger(DOMAIN_LOGGERS.get(domain, "portable.resilience"))

#: Loggers (with their children) whose records are masked: the SDKs the drivers use, and portable's own.
MASKED_LOGGERS: tuple[str, ...] = (
    "adlfs",
    "aiobotocore",
    "aiohttp",
    "azure",
    "boto3",
    "botocore",
    "confluent_kafka",
    "fsspec",
    "gcsfs",
    "google",
    "google_auth_httplib2",
    "grpc",
    "httpcore",
    "httpx",
    "kafka",
    "obstore",
    "portable",
    "redis",
    "requests",
    "s3fs",
    "s3transfer",
    "urllib3",
)

_PREFIXES = tuple(f"{name}." for name in MASKED_LOGGERS)
_NAMES = frozenset(MASKED_LOGGERS)
_lock = threading.Lock()
_installed = False


def is_masked_logger(name: str | None) -> bool:
    """Whether records of the logger ``name`` are masked once :func:`install_secret_masking` ran."""
    if not name:
        return False
    return name in _NAMES or name.startswith(_PREFIXES) or name.startswith("portable_")


class SecretMaskingFilter(logging.Filter):
    """A filter that masks secrets in every record it sees, and lets every record through.

    It formats the message with its arguments, masks it, and stores the result
    as ``record.msg`` with ``record.args`` emptied, so that no handler formats
    the unmasked arguments again; the exception (its whole cause chain, see
    :func:`~portable.driver.redaction.scrub_exception_chain`), ``exc_text``
    and ``stack_info`` are masked too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        mask_record(record)
        return True


def mask_record(record: logging.LogRecord) -> logging.LogRecord:
    """Mask ``record`` in place (see :class:`SecretMaskingFilter`) and return it."""
    try:
        if record.args:
            try:
                message = record.getMessage()
            except Exception:  # a bad format: keep both parts, masked, for the handler's error report
                message = f"{record.msg} {record.args!r}"
            record.msg = redact(message)
            record.args = None
        elif isinstance(record.msg, str):
            record.msg = redact(record.msg)
        else:
            text = str(record.msg)
            masked = redact(text)
            if masked != text:
                record.msg = masked
        if record.exc_info and record.exc_info[1] is not None:
            scrub_exception_chain(record.exc_info[1])
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
    except Exception:  # masking must never break the caller's logging
        pass
    return record


def install_secret_masking() -> None:
    """Mask the records of :data:`MASKED_LOGGERS` from now on, in this process (once; later calls do nothing)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def masking_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if is_masked_logger(record.name):
                mask_record(record)
            return record

        logging.setLogRecordFactory(masking_factory)
        _installed = True
