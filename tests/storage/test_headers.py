"""cache_control, content_encoding and content_disposition: named arguments, stored and returned by head.

Metadata whose names look like headers stays user metadata: headers come only
from the named arguments (issue 15 item 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from portable.errors import InvalidArgument
from portable.storage import Bucket, open_bucket

HEADERS = {
    "cache_control": "public, max-age=3600",
    "content_encoding": "gzip",
    "content_disposition": "attachment; filename=\"report.csv\"; filename*=UTF-8''r%C3%A9port.csv",
}
NONE = dict.fromkeys(HEADERS)


def headers_of(bucket: Bucket, key: str) -> dict[str, Any]:
    info = bucket.head(key)
    return {name: getattr(info, name) for name in HEADERS}


@pytest.fixture(params=["file", "mem"])
def bucket(request: Any, tmp_path: Path) -> Bucket:
    return open_bucket(f"file://{tmp_path / 'b'}" if request.param == "file" else "mem://")


def test_put_stores_the_headers_and_head_returns_them(bucket):
    bucket.put("k", b"x", content_type="text/csv", **HEADERS)
    assert headers_of(bucket, "k") == HEADERS
    assert bucket.head("k").content_type == "text/csv"
    assert bucket.head("k").metadata == {}


def test_each_header_alone(bucket):
    for name, value in HEADERS.items():
        bucket.put(name, b"x", **{name: value})
        assert headers_of(bucket, name) == {**NONE, name: value}


def test_a_rewrite_without_headers_has_none(bucket):
    bucket.put("k", b"x", **HEADERS)
    bucket.put("k", b"y")
    assert headers_of(bucket, "k") == NONE


def test_streamed_writes_store_them(bucket):
    with bucket.open("s", "wb", part_size=2, **HEADERS) as out:
        out.write(b"streamed")
    assert headers_of(bucket, "s") == HEADERS


def test_put_many_stores_them_on_every_object(bucket):
    bucket.put_many({"a": b"1", "b": b"2"}, metadata={"m": "1"}, **HEADERS)
    assert headers_of(bucket, "a") == HEADERS == headers_of(bucket, "b")
    assert bucket.head("b").metadata == {"m": "1"}


def test_copy_keeps_them(bucket):
    bucket.put("src", b"x", content_type="text/plain", metadata={"m": "v"}, **HEADERS)
    bucket.copy("src", "dst")
    bucket.copy_many({"src": "dst2"})
    for key in ("dst", "dst2"):
        assert headers_of(bucket, key) == HEADERS
        assert bucket.head(key).metadata == {"m": "v"}


def test_an_idempotent_put_stores_them(bucket):
    bucket.put("i", b"x", if_none_match="*", idempotency_key="k1", **HEADERS)
    assert headers_of(bucket, "i") == HEADERS


def test_metadata_named_like_headers_stays_user_metadata(bucket):
    meta = {
        "cache-control": "no-store",
        "content-type": "text/html",
        "content-encoding": "br",
        "content-disposition": "inline",
        "storage-class": "GLACIERX",
    }
    bucket.put("m", b"x", metadata=meta)
    info = bucket.head("m")
    assert dict(info.metadata) == meta
    assert info.content_type is None
    assert headers_of(bucket, "m") == NONE


def test_the_file_driver_keeps_them_in_the_sidecar(tmp_path):
    bucket = open_bucket(f"file://{tmp_path}")
    bucket.put("dir/k", b"x", **HEADERS)
    sidecar = json.loads((tmp_path / "dir" / ".portable-meta.k").read_bytes())
    assert {name: sidecar[name] for name in HEADERS} == HEADERS


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "1 to 1,024"),
        ("x" * 1025, "1 to 1,024"),
        ("max-age=1\r\nX-Evil: 1", "printable ASCII"),
        ("attachment; filename=r\u00e9port.csv", "printable ASCII"),
        ("a\u2028b", "printable ASCII"),
        (3600, "must be a str"),
    ],
)
@pytest.mark.parametrize("name", sorted(HEADERS))
def test_a_bad_header_is_refused_before_any_request(name, value, why):
    bucket = open_bucket("chaos+mem://?error_rate=1&faults=unavailable")  # any request would fail Unavailable
    for write in (
        lambda: bucket.put("k", b"x", **{name: value}),
        lambda: bucket.put_many({"k": b"x"}, **{name: value}),
        lambda: bucket.open("k", "wb", **{name: value}),
    ):
        with pytest.raises(InvalidArgument, match=name) as info:
            write()
        assert why in str(info.value)


def test_the_longest_header_is_accepted(bucket):
    bucket.put("k", b"x", cache_control="x" * 1024)
    assert bucket.head("k").cache_control == "x" * 1024


def test_headers_are_for_writes_only(bucket):
    bucket.put("k", b"x")
    with pytest.raises(InvalidArgument, match="mode 'wb' only"):
        bucket.open("k", "rb", cache_control="no-cache")  # type: ignore[call-overload]
