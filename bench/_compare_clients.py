"""The contestants of bench/compare.py: portable (each engine) and every peer, per store.

Each client is built once per run and offers ``put(items)`` and ``get(keys)``
for a batch: 16 objects in flight (``IN_FLIGHT``), the same for everyone, each
in the client's own idiom. The async libraries (obstore, OpenDAL) run in both
of their documented idioms, as separate contestants: one task per object
behind an ``asyncio.Semaphore`` (``asyncio.gather``, as their examples do),
and a fixed pool of 16 worker coroutines taking keys from one iterator (the
idiom portable[obstore] uses inside). The synchronous SDKs run on a pool of 16
threads. Durability is the server's for everyone: one PUT per object, no
client-side cache, no retries (portable's own retries never fire on a healthy
server). A client writes under its own prefix, so contestants never read each
other's objects.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import hashlib
import hmac
import http.client
import json
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IN_FLIGHT = 16


@dataclass
class Target:
    """Where a store is and how to reach it."""

    kind: str  # "s3" | "azure" | "gcs"
    endpoint: str
    bucket: str
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = ""
    account: str = ""
    account_key: str = ""


@dataclass
class Client:
    name: str
    put: Callable[[dict[str, bytes]], None]
    get: Callable[[list[str]], None]
    close: Callable[[], None] = lambda: None
    can_put: bool = True


class _Loop:
    """One private event loop per async peer, driven from the main thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.close()


async def _gather_bounded(fn: Callable[[Any], Any], items: list[Any]) -> None:
    """One task per item, at most IN_FLIGHT running (a semaphore): the libraries' documented idiom."""
    sem = asyncio.Semaphore(IN_FLIGHT)

    async def one(item: Any) -> None:
        async with sem:
            await fn(item)

    await asyncio.gather(*(one(i) for i in items))


async def _worker_pool(fn: Callable[[Any], Any], items: list[Any]) -> None:
    """IN_FLIGHT worker coroutines sharing one iterator: no task and no semaphore per item."""
    it = iter(items)

    async def worker() -> None:
        for item in it:
            await fn(item)

    await asyncio.gather(*(worker() for _ in range(min(IN_FLIGHT, len(items)))))


#: contestant-name suffix -> how the async peers schedule a batch
ASYNC_IDIOMS: dict[str, Callable[[Callable[[Any], Any], list[Any]], Any]] = {
    "tasks": _gather_bounded,
    "pool": _worker_pool,
}


def _threads(fn: Callable[[Any], Any], items: list[Any], pool: concurrent.futures.ThreadPoolExecutor) -> None:
    for _ in pool.map(fn, items):
        pass


def _worker_threads(fn: Callable[[Any], Any], items: list[Any], pool: concurrent.futures.ThreadPoolExecutor) -> None:
    """IN_FLIGHT workers on ``pool`` sharing one iterator: no future per item (the threads' "pool" idiom)."""
    it = iter(items)

    def drain() -> None:
        for item in it:
            fn(item)

    for future in [pool.submit(drain) for _ in range(min(IN_FLIGHT, len(items)))]:
        future.result()


#: contestant-name suffix -> how the blocking peers schedule a batch on 16 threads
THREAD_IDIOMS: dict[str, Callable[[Callable[[Any], Any], list[Any], concurrent.futures.ThreadPoolExecutor], None]] = {
    "16 threads": _threads,
    "16 worker threads": _worker_threads,
}


# -- portable ---------------------------------------------------------------
def portable_client(name: str, url: str) -> Client:
    from portable.config import Profile
    from portable.storage import open_bucket

    bucket = open_bucket(url, profile=Profile(name="bench", storage=url, queue="mem://bench", jobs="local://./.portable/jobs"))

    def put(items: dict[str, bytes]) -> None:
        bucket.put_many(items)

    def get(keys: list[str]) -> None:
        got = bucket.get_many(keys)
        assert len(got) == len(keys)

    return Client(name, put, get, bucket.close)


# -- obstore ----------------------------------------------------------------
def obstore_store(t: Target) -> Any:
    from obstore.store import AzureStore, GCSStore, S3Store

    opts = {"allow_http": True}
    if t.kind == "s3":
        # UNSIGNED-PAYLOAD, as portable[obstore] is configured here and as OpenDAL always signs
        return S3Store(t.bucket, endpoint=t.endpoint, region=t.region, access_key_id=t.access_key,
                       secret_access_key=t.secret_key, unsigned_payload=True, client_options=opts,
                       retry_config={"max_retries": 0})
    if t.kind == "azure":
        return AzureStore(t.bucket, account_name=t.account, account_key=t.account_key, endpoint=t.endpoint,
                          client_options=opts, retry_config={"max_retries": 0})
    key = json.dumps({"gcs_base_url": t.endpoint, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""})
    return GCSStore(t.bucket, service_account_key=key, client_options=opts, retry_config={"max_retries": 0})


def obstore_client(t: Target, prefix: str, idiom: str = "tasks") -> Client:
    """obstore's async API; ``idiom`` "tasks" (a task per object) or "pool" (16 worker coroutines)."""
    import obstore

    store = obstore_store(t)
    loop = _Loop()

    async def put_one(item: tuple[str, bytes]) -> None:
        # One PutObject, as portable sends: obstore's default (use_multipart=None) turns a body
        # over 5 MiB into a multipart upload of four requests, which halved its 8 MiB rate.
        await obstore.put_async(store, prefix + item[0], item[1], use_multipart=False)

    async def get_one(key: str) -> None:
        result = await obstore.get_async(store, prefix + key)
        await result.bytes_async()

    schedule = ASYNC_IDIOMS[idiom]
    return Client(
        f"obstore ({idiom})",
        lambda items: loop.run(schedule(put_one, list(items.items()))),
        lambda keys: loop.run(schedule(get_one, keys)),
        loop.close,
        can_put=t.kind != "gcs",  # fake-gcs-server lacks object_store's XML uploads
    )


# -- OpenDAL ----------------------------------------------------------------
def opendal_client(t: Target, prefix: str, idiom: str = "tasks") -> Client:
    """OpenDAL's AsyncOperator (its documented API for concurrency; no RetryLayer, so no retries);
    ``idiom`` as for :func:`obstore_client`."""
    import opendal

    if t.kind == "s3":
        op = opendal.AsyncOperator("s3", bucket=t.bucket, endpoint=t.endpoint, region=t.region,
                                   access_key_id=t.access_key, secret_access_key=t.secret_key, root="/" + prefix)
    elif t.kind == "azure":
        op = opendal.AsyncOperator("azblob", container=t.bucket, endpoint=t.endpoint, account_name=t.account,
                                   account_key=t.account_key, root="/" + prefix)
    else:
        op = opendal.AsyncOperator("gcs", bucket=t.bucket, endpoint=t.endpoint, root="/" + prefix,
                                   allow_anonymous="true", disable_vm_metadata="true", disable_config_load="true")
    loop = _Loop()

    async def put_one(item: tuple[str, bytes]) -> None:
        await op.write(item[0], item[1])

    async def get_one(key: str) -> None:
        await op.read(key)

    schedule = ASYNC_IDIOMS[idiom]
    return Client(
        f"OpenDAL ({idiom})",
        lambda items: loop.run(schedule(put_one, list(items.items()))),
        lambda keys: loop.run(schedule(get_one, keys)),
        loop.close,
    )


# -- obstore and OpenDAL, their blocking calls on 16 threads -----------------------
def blocking_client(t: Target, prefix: str, library: str, idiom: str) -> Client:
    """obstore's or OpenDAL's *blocking* API (each call releases the GIL while it waits) on 16 threads.

    ``idiom`` "16 threads" is ``ThreadPoolExecutor.map`` (as boto3 is driven);
    "16 worker threads" is 16 workers sharing one iterator, the scheduling
    portable's obstore batches use inside (``portable.driver.fanout``).
    """
    pool = concurrent.futures.ThreadPoolExecutor(IN_FLIGHT)
    if library == "obstore":
        import obstore

        store = obstore_store(t)

        def put_one(item: tuple[str, bytes]) -> None:
            obstore.put(store, prefix + item[0], item[1], use_multipart=False)

        def get_one(key: str) -> None:
            obstore.get(store, prefix + key).bytes()

        name = f"obstore blocking ({idiom})"
    else:
        import opendal

        op = opendal.Operator("s3", bucket=t.bucket, endpoint=t.endpoint, region=t.region,
                              access_key_id=t.access_key, secret_access_key=t.secret_key, root="/" + prefix)

        def put_one(item: tuple[str, bytes]) -> None:
            op.write(item[0], item[1])

        def get_one(key: str) -> None:
            op.read(key)

        name = f"OpenDAL blocking ({idiom})"
    schedule = THREAD_IDIOMS[idiom]
    return Client(
        name,
        lambda items: schedule(put_one, list(items.items()), pool),
        lambda keys: schedule(get_one, keys, pool),
        pool.shutdown,
    )


# -- fsspec peers, tuned --------------------------------------------------------
def s3fs_client(t: Target, prefix: str) -> Client:
    """s3fs tuned: retries off, no HEAD before a GET (max_concurrency=1), batch_size=16, pool of 16."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=t.access_key, secret=t.secret_key, skip_instance_cache=True, use_listings_cache=False,
        max_concurrency=1, client_kwargs={"endpoint_url": t.endpoint, "region_name": t.region},
        config_kwargs={"retries": {"total_max_attempts": 1}, "max_pool_connections": IN_FLIGHT,
                       "s3": {"addressing_style": "path"}},
    )
    fs.retries = 1
    base = f"{t.bucket}/{prefix}"
    return Client(
        "s3fs (tuned)",
        lambda items: fs.pipe({base + k: v for k, v in items.items()}, batch_size=IN_FLIGHT),
        lambda keys: fs.cat([base + k for k in keys], batch_size=IN_FLIGHT),
    )


def gcsfs_client(t: Target, prefix: str) -> Client:
    import gcsfs

    fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=t.endpoint, skip_instance_cache=True, use_listings_cache=False)
    base = f"{t.bucket}/{prefix}"
    return Client(
        "gcsfs",
        lambda items: fs.pipe({base + k: v for k, v in items.items()}, batch_size=IN_FLIGHT),
        lambda keys: fs.cat([base + k for k in keys], batch_size=IN_FLIGHT),
    )


def adlfs_client(t: Target, prefix: str) -> Client:
    from adlfs import AzureBlobFileSystem

    conn = (f"DefaultEndpointsProtocol=http;AccountName={t.account};AccountKey={t.account_key};"
            f"BlobEndpoint={t.endpoint};")
    fs = AzureBlobFileSystem(connection_string=conn, skip_instance_cache=True)
    base = f"{t.bucket}/{prefix}"
    return Client(
        "adlfs",
        lambda items: fs.pipe({base + k: v for k, v in items.items()}, batch_size=IN_FLIGHT),
        lambda keys: fs.cat([base + k for k in keys], batch_size=IN_FLIGHT),
    )


# -- the SDKs, 16 threads ---------------------------------------------------------
def boto3_client(t: Target, prefix: str) -> Client:
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=t.endpoint, region_name=t.region, aws_access_key_id=t.access_key,
                      aws_secret_access_key=t.secret_key,
                      config=Config(retries={"total_max_attempts": 1}, max_pool_connections=IN_FLIGHT,
                                    s3={"addressing_style": "path"}))
    pool = concurrent.futures.ThreadPoolExecutor(IN_FLIGHT)

    def put_one(item: tuple[str, bytes]) -> None:
        s3.put_object(Bucket=t.bucket, Key=prefix + item[0], Body=item[1])

    def get_one(key: str) -> None:
        s3.get_object(Bucket=t.bucket, Key=prefix + key)["Body"].read()

    return Client(
        "boto3 (16 threads)",
        lambda items: _threads(put_one, list(items.items()), pool),
        lambda keys: _threads(get_one, keys, pool),
        pool.shutdown,
    )


def azure_sdk_client(t: Target, prefix: str) -> Client:
    from azure.storage.blob import BlobServiceClient

    conn = (f"DefaultEndpointsProtocol=http;AccountName={t.account};AccountKey={t.account_key};"
            f"BlobEndpoint={t.endpoint};")
    container = BlobServiceClient.from_connection_string(conn, retry_total=0).get_container_client(t.bucket)
    pool = concurrent.futures.ThreadPoolExecutor(IN_FLIGHT)

    def put_one(item: tuple[str, bytes]) -> None:
        container.upload_blob(prefix + item[0], item[1], overwrite=True)

    def get_one(key: str) -> None:
        container.download_blob(prefix + key).readall()

    return Client(
        "azure-storage-blob (16 threads)",
        lambda items: _threads(put_one, list(items.items()), pool),
        lambda keys: _threads(get_one, keys, pool),
        pool.shutdown,
    )


# -- raw HTTP: http.client, SigV4 by hand, one keep-alive connection per thread --------
def _sigv4_headers(t: Target, method: str, path: str, host: str) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = "UNSIGNED-PAYLOAD"
    canonical = "\n".join([method, path, "", f"host:{host}", f"x-amz-content-sha256:{payload}",
                           f"x-amz-date:{amz_date}", "", "host;x-amz-content-sha256;x-amz-date", payload])
    scope = f"{day}/{t.region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + t.secret_key).encode()
    for part in (day, t.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={t.access_key}/{scope}, "
        f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}",
    }


def raw_http_client(t: Target, prefix: str) -> Client:
    parts = urllib.parse.urlsplit(t.endpoint)
    host = parts.netloc
    local = threading.local()
    pool = concurrent.futures.ThreadPoolExecutor(IN_FLIGHT)

    def conn() -> http.client.HTTPConnection:
        c = getattr(local, "conn", None)
        if c is None:
            c = local.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        return c

    def request(method: str, key: str, body: bytes | None) -> bytes:
        path = "/" + t.bucket + "/" + urllib.parse.quote(prefix + key)
        headers = _sigv4_headers(t, method, path, host)
        c = conn()
        c.request(method, path, body=body, headers=headers)
        resp = c.getresponse()
        data = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}")
        return data

    return Client(
        "raw HTTP (http.client, 16 threads)",
        lambda items: _threads(lambda kv: request("PUT", kv[0], kv[1]), list(items.items()), pool),
        lambda keys: _threads(lambda k: request("GET", k, None), keys, pool),
        pool.shutdown,
    )
