"""redact(), scrub_exception_chain() and the SDK log masking, one behaviour at a time."""

from __future__ import annotations

import logging
import pickle
import traceback
from typing import Any

import pytest

from portable.driver.redaction import is_secret_option, redact, redact_value, scrub_exception_chain

from .conftest import SECRET, chain_of


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("s3://b?aws%5Fsecret%5Faccess%5Fkey=S&region=x", "s3://b?aws_secret_access_key=***&region=x"),
        ("s3://b?AWS_SECRET_ACCESS_KEY=S", "s3://b?AWS_SECRET_ACCESS_KEY=***"),
        ("s3://b?token=abc'S&x=1", "s3://b?token=***&x=1"),
        ("ParsedURL('s3://b?token=abc')", "ParsedURL('s3://b?token=***')"),
        ("option token='abc'S' in s3://b", "option token='***' in s3://b"),
        ('Config(password="a b", user=\'u\')', "Config(password=\"***\", user='u')"),
        ("http://u:p@ss@host:9/x", "http://u:***@host:9/x"),
        ("https://S@github.com/x", "https://***@github.com/x"),
        ("got 'AKIA:S@bucket'", "got 'AKIA:***@bucket'"),
        ("endpoint_url=http%3A%2F%2Fu%3AS%40host", "endpoint_url=http://u:***@host"),
        ("{'sasl_plain_password': 'S', 'nested': {'client_secret': b'S'}}", "{'sasl_plain_password': '***', 'nested': {'client_secret': b'***'}}"),
        ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nS\\n-----END PRIVATE KEY-----\\n"}', '{"private_key": "***"}'),
        ("AccountName=a;AccountKey=S==;BlobEndpoint=http://x", "AccountName=a;AccountKey=***;BlobEndpoint=http://x"),
        ("GET\n/\nx-amz-security-token:S\nhost:h", "GET\n/\nx-amz-security-token:***\nhost:h"),
        ("Authorization: Bearer S", "Authorization: ***"),
        ("sent Bearer S.T to h", "sent Bearer *** to h"),
        ("sasl.password=S", "sasl.password=***"),
        ("cfg=dict(password='S', b=1)", "cfg=dict(password='***', b=1)"),
    ],
)
def test_redact_masks_every_form(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(shown) == shown  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "idempotency_key=k1 conflicts",
        "partition_key=p ordering_key=o",
        "abfs://container@acct.dfs.core.windows.net/p",
        "at 10:30 user@host",
        "50% done",
        "s3://bucket/prefix?region=eu-west-1&endpoint_url=http://127.0.0.1:9000",
    ],
)
def test_redact_leaves_what_is_not_a_secret(text: str) -> None:
    assert redact(text) == text


def test_secret_names_are_matched_case_and_separator_insensitively() -> None:
    assert is_secret_option("X-Amz-Security-Token") and is_secret_option("sasl.password")
    assert is_secret_option("AWS_SECRET_ACCESS_KEY") and is_secret_option("my_api_token")
    assert not is_secret_option("idempotency_key") and not is_secret_option("region")


def test_redact_value_masks_containers_by_key_and_keeps_unchanged_objects() -> None:
    data = {"password": "S", "url": "s3://u:S@b", "n": 1, "list": ["token=S", 2], "raw": b"sig=S"}
    masked = redact_value(data)
    assert masked == {"password": "***", "url": "s3://u:***@b", "n": 1, "list": ["token=***", 2], "raw": b"sig=***"}
    clean = {"a": "b", "c": [1, "d"]}
    assert redact_value(clean) is clean


# ---------------------------------------------------------------- exceptions whose text is not their args
class _Response:
    """What azure-core's HttpResponseError reads from a response (a stand-in for the transport's object)."""

    status_code = 403
    reason = "Forbidden"
    headers: dict[str, str] = {}
    content_type = "text/plain"

    def text(self, encoding: str | None = None) -> str:
        return f"signature did not match: AccountKey={SECRET};"


def _printed(exc: BaseException) -> str:
    try:
        raise RuntimeError("wrapped") from exc
    except RuntimeError as outer:
        scrub_exception_chain(outer)
        return traceback.format_exc() + "".join(str(e) + repr(e) for e in chain_of(outer))


def test_azure_core_errors_that_append_the_response_body_are_masked() -> None:
    from azure.core.exceptions import HttpResponseError

    exc = HttpResponseError(message="Server failed to authenticate", response=_Response())
    assert SECRET in str(exc)  # azure-core appends the body: its str does not come from args
    text = _printed(exc)
    assert SECRET not in text and "AccountKey=***" in text
    assert isinstance(exc, HttpResponseError) and type(exc).__name__ == "HttpResponseError"
    assert exc.status_code == 403


def test_google_api_core_errors_are_masked() -> None:
    from google.api_core.exceptions import PermissionDenied

    exc = PermissionDenied(f"denied for https://user:{SECRET}@host", details=[f"token={SECRET}"])
    assert SECRET not in _printed(exc)
    assert exc.code == 403


def test_botocore_and_kafka_errors_are_masked() -> None:
    from botocore.exceptions import EndpointConnectionError
    from kafka.errors import KafkaConnectionError

    boto = EndpointConnectionError(endpoint_url=f"http://u:{SECRET}@127.0.0.1:9/b")
    assert SECRET not in _printed(boto) and SECRET not in repr(boto.kwargs)
    kafka = KafkaConnectionError(f"sasl_plain_password={SECRET}")
    assert SECRET not in _printed(kafka)


def test_groups_notes_os_errors_and_portable_errors_are_masked() -> None:
    from portable.errors import Unavailable

    inner = OSError(2, "No such file", f"/tmp/x?token={SECRET}")
    noted = ValueError("plain")
    noted.add_note(f"while calling s3://a:{SECRET}@b")
    group = ExceptionGroup("two", [inner, noted])
    portable_error = Unavailable(f"no answer from http://u:{SECRET}@h")
    portable_error.__cause__ = group
    assert SECRET not in _printed(portable_error)
    assert portable_error.message == "no answer from http://u:***@h"


def test_a_masked_error_still_pickles_as_its_own_class() -> None:
    from google.api_core.exceptions import PermissionDenied

    exc = PermissionDenied(f"token={SECRET}")
    scrub_exception_chain(exc)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is PermissionDenied and SECRET not in str(back)


def test_a_masked_error_with_a_circular_chain_terminates() -> None:
    a = ValueError(f"password={SECRET}")
    b = KeyError(f"token={SECRET}")
    a.__context__ = b
    b.__context__ = a
    scrub_exception_chain(a)
    assert SECRET not in str(a) + str(b)


# ---------------------------------------------------------------- the SDK log records
def test_child_loggers_of_the_sdks_are_masked_whatever_the_handler(caplog: pytest.LogCaptureFixture) -> None:
    from portable._logging import install_secret_masking, is_masked_logger

    install_secret_masking()
    install_secret_masking()  # once
    assert is_masked_logger("botocore.endpoint") and is_masked_logger("portable_kafka") and not is_masked_logger("app")
    caplog.set_level(logging.DEBUG)
    logging.getLogger("botocore.endpoint.deep.child").debug("Making request %s", {"url": f"http://u:{SECRET}@h"})
    logging.getLogger("kafka.admin.client").debug("config: %s", {"sasl_plain_password": SECRET})
    logging.getLogger("app").debug("app logs are the app's: %s", "untouched")
    assert len(caplog.records) == 3
    assert all(SECRET not in r.getMessage() and SECRET not in repr(r.args) for r in caplog.records)
    assert caplog.records[2].args == ("untouched",)


def test_the_filter_masks_any_record_on_a_handler_of_ones_own() -> None:
    from portable._logging import SecretMaskingFilter

    record = logging.LogRecord("app", logging.INFO, __file__, 1, "url %s", (f"s3://u:{SECRET}@b",), None)
    assert SecretMaskingFilter().filter(record) is True
    assert record.getMessage() == "url s3://u:***@b" and not record.args


def test_opening_a_driver_installs_the_masking(monkeypatch: pytest.MonkeyPatch) -> None:
    import portable._logging as masking
    from portable import open_bucket

    previous = logging.getLogRecordFactory()
    monkeypatch.setattr(masking, "_installed", False)
    try:
        open_bucket("mem://masking-installed")
        assert logging.getLogRecordFactory() is not previous
        record = logging.getLogger("urllib3.connectionpool").makeRecord(
            "urllib3.connectionpool", logging.DEBUG, __file__, 1, "%s", (f"token={SECRET}",), None
        )
        assert SECRET not in record.getMessage()
    finally:
        logging.setLogRecordFactory(previous)


def test_an_error_raised_while_a_driver_opens_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    import portable.urls as urls
    from portable import open_bucket

    class Exploding:
        @classmethod
        def from_url(cls, url: Any) -> Any:
            raise ValueError(f"Invalid endpoint: http://u:{SECRET}@h")

    monkeypatch.setitem(urls._BUILTIN["storage"], "explode", ("tests.secrets.test_redaction:_EXPLODING", None))
    monkeypatch.setattr(urls, "_import", lambda target, scheme, extra: Exploding)
    with pytest.raises(ValueError) as info:
        open_bucket("explode://b")
    assert SECRET not in str(info.value) + "".join(traceback.format_exception(info.value))
