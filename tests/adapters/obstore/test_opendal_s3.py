"""s3://...?engine=opendal on moto: the storage contract, which engine reads, errors, and interop
with boto3 both ways. The engine's reads run on OpenDAL, the rest on obstore (portable_opendal.s3)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from portable.errors import NotFound, Unavailable
from portable.storage import Bucket, open_bucket
from portable.testing.storage_suite import StorageContract, contract_profile

opendal = pytest.importorskip("opendal", reason="portable-cloud-opendal is not installed")

MOTO_RACE = (
    "moto 5.2.5 checks If-None-Match / If-Match and then writes without a lock on its threaded "
    "server, so racing conditional writes can both win there; AWS S3 serialises them"
)


class TestOpenDALS3Contract(StorageContract):
    xfail = {}

    @pytest.fixture
    def bucket_url(self, s3_bucket: str, unique_name: str, s3_query: str) -> str:
        return f"s3://{s3_bucket}/{unique_name}?engine=opendal&{s3_query}"

    @pytest.mark.skip(reason=MOTO_RACE)
    def test_racing_create_only_writes_have_one_winner(self) -> None: ...

    @pytest.mark.skip(reason=MOTO_RACE)
    def test_racing_compare_and_swap_has_one_winner(self) -> None: ...


@pytest.fixture
def url(s3_bucket: str, unique_name: str, s3_query: str) -> str:
    return f"s3://{s3_bucket}/{unique_name}?engine=opendal&{s3_query}"


@pytest.fixture
def bucket(url: str) -> Iterator[Bucket]:
    b = open_bucket(url, profile=contract_profile(url))
    yield b
    b.close()


@pytest.fixture
def boto(aws: dict[str, str]) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=aws["endpoint_url"], region_name=aws["region"])


def test_the_engine_is_chosen_by_name_and_never_by_default(url: str) -> None:
    from portable_obstore.s3 import ObstoreS3Storage
    from portable_opendal.s3 import OpenDALS3Storage

    from portable.urls import driver_class

    assert driver_class("storage", url) is OpenDALS3Storage
    assert driver_class("storage", url.replace("engine=opendal", "engine=obstore")) is ObstoreS3Storage
    assert driver_class("storage", url.replace("engine=opendal&", "")) is ObstoreS3Storage


def test_reads_run_on_opendal(bucket: Bucket) -> None:
    """A missing key's NotFound is caused by OpenDAL's error on get and in get_many (the reads'
    library), and by obstore's on head (which stays on obstore)."""
    import obstore.exceptions as oe

    with pytest.raises(NotFound) as got:
        bucket.get("missing.txt")
    assert isinstance(got.value.__cause__, opendal.exceptions.NotFound)
    bucket.put("there.txt", b"x")
    driver = bucket._driver  # type: ignore[attr-defined]
    outcomes = dict(driver.get_many(["there.txt", "missing.txt"]))  # the driver's own outcome of each key
    assert outcomes["there.txt"] == b"x"
    assert isinstance(outcomes["missing.txt"], opendal.exceptions.NotFound)
    with pytest.raises(NotFound) as head:
        bucket.head("missing.txt")
    assert isinstance(head.value.__cause__, FileNotFoundError | oe.NotFoundError)
    assert bucket.as_(opendal.Operator) is not None


def test_reads_what_boto3_wrote_and_boto3_reads_what_it_wrote(bucket: Bucket, boto: Any, s3_bucket: str, unique_name: str) -> None:
    keys = ["plain.txt", "sp ace/ü+%?#&=.bin", "deep/a/b/c.json"]
    for i, key in enumerate(keys):
        boto.put_object(Bucket=s3_bucket, Key=f"{unique_name}/{key}", Body=f"boto {i}".encode())
    assert bucket.get_many(keys) == {key: f"boto {i}".encode() for i, key in enumerate(keys)}
    assert bucket.get(keys[1]) == b"boto 1"
    bucket.put_many({f"p/{key}": f"portable {i}".encode() for i, key in enumerate(keys)})
    for i, key in enumerate(keys):
        body = boto.get_object(Bucket=s3_bucket, Key=f"{unique_name}/p/{key}")["Body"].read()
        assert body == f"portable {i}".encode()


def test_a_large_batch_and_an_empty_object(bucket: Bucket) -> None:
    items = {f"b/{i:03d}": bytes([i % 256]) * (i * 7) for i in range(200)}
    bucket.put_many(items)
    assert bucket.get_many(items) == items
    bucket.put("empty", b"")
    assert bucket.get("empty") == b""


def test_a_server_that_refuses_is_unavailable(s3_bucket: str, s3_query: str, unique_name: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    query = "&".join(p for p in s3_query.split("&") if not p.startswith("endpoint_url="))
    dead = open_bucket(f"s3://{s3_bucket}/{unique_name}?engine=opendal&{query}&endpoint_url=http://127.0.0.1:{port}",
                       profile=contract_profile("s3://x"))
    try:
        with pytest.raises(Unavailable) as got:
            dead.get("k")
        assert isinstance(got.value.__cause__, opendal.exceptions.Unexpected)
        secret = os.environ["AWS_SECRET_ACCESS_KEY"]
        chain: BaseException | None = got.value
        while chain is not None:  # OpenDAL was given the keys: none of the errors may show them
            assert secret not in str(chain) and secret not in repr(chain)
            chain = chain.__cause__ or chain.__context__
    finally:
        dead.close()


def test_a_server_that_never_answers_times_out(s3_bucket: str, s3_query: str, unique_name: str) -> None:
    """The URL's timeout bounds an OpenDAL read (its TimeoutLayer): a listener that accepts and never
    answers fails the read in about ``timeout`` seconds, as a deadline, not a hang."""
    from portable.errors import DeadlineExceeded

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    query = "&".join(p for p in s3_query.split("&") if not p.startswith("endpoint_url="))
    port = server.getsockname()[1]
    slow = open_bucket(f"s3://{s3_bucket}/{unique_name}?engine=opendal&{query}&timeout=1&endpoint_url=http://127.0.0.1:{port}",
                       profile=contract_profile("s3://x"))
    try:
        with pytest.raises((DeadlineExceeded, Unavailable)) as got:
            slow.get("k")
        assert "timeout" in str(got.value.__cause__).lower()
    finally:
        slow.close()
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_repr_names_no_secret(bucket: Bucket) -> None:
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    assert secret not in repr(bucket) and "OpenDALS3Storage" in repr(bucket._driver)  # type: ignore[attr-defined]


def test_reads_sign_for_the_region_a_profile_names(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, s3_bucket: str, aws: dict[str, str]) -> None:
    """With ``profile=`` and no ``region=``, the profile's region is the one obstore signs for, and
    OpenDAL's reads sign for the same one (not us-east-1); the profile's keys serve both sides."""
    from portable_opendal.s3 import OpenDALS3Storage

    from portable.driver.storage import WriteOptions

    config = tmp_path / "config"
    config.write_text(
        "[profile bench]\nregion = eu-west-3\n"
        f"aws_access_key_id = {os.environ['AWS_ACCESS_KEY_ID']}\naws_secret_access_key = {os.environ['AWS_SECRET_ACCESS_KEY']}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    driver = OpenDALS3Storage(s3_bucket, "regions", endpoint_url=aws["endpoint_url"], profile="bench")
    try:
        assert driver.read_region == "eu-west-3"
        driver.put("k", b"v", WriteOptions())
        assert driver.get("k") == b"v"
    finally:
        driver.close()
