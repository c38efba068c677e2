"""BucketFileSystem beyond fsspec's abstract suite: the ``portable://`` protocol and its profiles,
``bucket.fs()``, errors, ranged reads and read-ahead, writes that fail, and the retry layer under
injected faults. Real buckets throughout (mem://, file://, moto's S3, chaos+ around mem://)."""

from __future__ import annotations

import gc
import hashlib
import io
import time
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

from portable.errors import (
    ConfigError,
    InvalidArgument,
    InvalidKey,
    InvalidURL,
    NotFound,
    PortableError,
    Unsupported,
)
from portable.fsspec import DEFAULT_BLOCK_SIZE, BucketFile, BucketFileSystem
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import Bucket, open_bucket
from portable.testing.chaos import chaos_of

#: Retries without waiting, no breaker: faults are injected on purpose.
QUICK_RETRIES = ResiliencePolicy(retry=RetryPolicy(max_attempts=8, initial_backoff=0, max_backoff=0), breaker=None)


def body(n: int, seed: int = 0) -> bytes:
    block = hashlib.sha256(f"{seed}".encode()).digest()
    return (block * (n // len(block) + 1))[:n]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A portable.toml with two mem:// profiles, named by PORTABLE_CONFIG; returns their URLs."""
    urls = {"default": f"mem://dflt-{uuid.uuid4().hex[:8]}", "lake": f"mem://lake-{uuid.uuid4().hex[:8]}"}
    path = tmp_path / "portable.toml"
    path.write_text("".join(f'[profiles.{n}]\nstorage = "{u}"\n' for n, u in urls.items()))
    monkeypatch.setenv("PORTABLE_CONFIG", str(path))
    for name in ("PORTABLE_PROFILE", "PORTABLE_STORAGE_URL", "PORTABLE_STORAGE_ENGINE"):
        monkeypatch.delenv(name, raising=False)
    return urls


def counting(name: str) -> Bucket:
    """A mem:// bucket under a chaos wrapper that injects nothing: its stats count the requests."""
    return open_bucket(f"chaos+mem://{name}-{uuid.uuid4().hex[:8]}?error_rate=0")


# -- the protocol, profiles and caching -------------------------------------------------------
def test_fsspec_finds_the_portable_protocol() -> None:
    assert fsspec.get_filesystem_class("portable") is BucketFileSystem


def test_portable_urls_name_a_profile_and_a_key(config: dict[str, str]) -> None:
    with fsspec.open("portable://lake/tables/a.txt", "wb") as f:
        f.write(b"in the lake")
    assert open_bucket(config["lake"]).get("tables/a.txt") == b"in the lake"
    with fsspec.open("portable://lake/tables/a.txt", "rb") as f:
        assert f.read() == b"in the lake"
    fs, path = fsspec.core.url_to_fs("portable://lake/tables/a.txt")
    assert isinstance(fs, BucketFileSystem) and path == "tables/a.txt"
    assert fs.unstrip_protocol(path) == "portable://lake/tables/a.txt"


def test_three_slashes_mean_the_active_profile(config: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    open_bucket(config["default"]).put("k", b"default's")
    open_bucket(config["lake"]).put("k", b"lake's")
    assert fsspec.open("portable:///k").open().read() == b"default's"
    monkeypatch.setenv("PORTABLE_PROFILE", "lake")
    assert fsspec.open("portable:///k").open().read() == b"lake's"  # not the cached default's fs


def test_storage_options_profile_and_url(config: dict[str, str]) -> None:
    open_bucket(config["lake"]).put("k", b"lake's")
    assert fsspec.open("portable:///k", profile="lake").open().read() == b"lake's"
    assert fsspec.open("portable:///k", url=config["lake"]).open().read() == b"lake's"
    # fsspec.core.url_to_fs (pandas' read_parquet, Dask) has its own parameter named url
    fs, _ = fsspec.core.url_to_fs("portable:///k", bucket_url=config["lake"])
    assert fs.cat_file("k") == b"lake's"


def test_an_unknown_profile_is_a_config_error(config: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="nope"):
        fsspec.open("portable://nope/k").open()
    with pytest.raises(ConfigError, match="nope"):
        BucketFileSystem(profile="nope")


def test_unknown_and_conflicting_options_are_errors(config: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument, match="'anon'"):
        fsspec.filesystem("portable", anon=True)
    with pytest.raises(InvalidArgument, match="not both"):
        BucketFileSystem(bucket=open_bucket("mem://x"), profile="lake")
    with pytest.raises(InvalidArgument, match="not both"):
        BucketFileSystem(url="mem://x", bucket_url="mem://y")
    with pytest.raises(InvalidArgument, match="default_cache_type"):
        BucketFileSystem(url="mem://x", default_cache_type="psychic")
    with pytest.raises(InvalidArgument, match="default_block_size"):
        BucketFileSystem(url="mem://x", default_block_size=0)


def test_instances_are_cached_per_profile_and_config(config: dict[str, str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    lake = BucketFileSystem(profile="lake")
    assert BucketFileSystem(profile="lake") is lake
    assert BucketFileSystem(profile="default") is not lake
    other = tmp_path / "other.toml"
    other.write_text('[profiles.lake]\nstorage = "mem://another-lake"\n')
    monkeypatch.setenv("PORTABLE_CONFIG", str(other))
    assert BucketFileSystem(profile="lake").bucket.url == "mem://another-lake"


def test_bucket_fs_serves_that_very_bucket() -> None:
    bucket = open_bucket(f"mem://fs-{uuid.uuid4().hex[:8]}")
    fs = bucket.fs()
    assert isinstance(fs, BucketFileSystem) and fs.bucket is bucket
    fs.pipe_file("a/b", b"1")
    assert bucket.get("a/b") == b"1"
    twin = open_bucket(bucket.url)  # same URL, another Bucket object: never the same fs
    assert twin.fs() is not fs and twin.fs().bucket is twin


def test_secrets_stay_out_of_reprs_and_errors() -> None:
    with pytest.raises(InvalidURL) as caught:  # portable takes credentials from the SDK's chain only
        BucketFileSystem(url="s3://pt-secret?region=us-east-1&endpoint_url=http://AKIDX:hunter2@127.0.0.1:9")
    assert "hunter2" not in str(caught.value) and "pt-secret" in str(caught.value)
    fs = BucketFileSystem(url="s3://pt-secret?region=us-east-1&endpoint_url=http://127.0.0.1:9")
    assert repr(fs) == f"BucketFileSystem({fs.bucket!r})" and "pt-secret" in repr(fs)


# -- errors ------------------------------------------------------------------------------------
def test_missing_objects_are_file_not_found_with_the_portable_cause(bfs: BucketFileSystem) -> None:
    for call in (lambda: bfs.cat_file("missing"), lambda: bfs.open("missing", "rb"),
                 lambda: bfs.info("missing"), lambda: bfs.ls("missing"), lambda: bfs.rm("missing"),
                 lambda: bfs.cat_file("missing", 0, 10), lambda: bfs.cp_file("missing", "b"),
                 lambda: bfs.rm("missing", recursive=True)):
        with pytest.raises(FileNotFoundError) as caught:
            call()
        assert isinstance(caught.value.__cause__, NotFound) or "missing" in str(caught.value)
    bfs.rm(["missing", "also-missing"])  # a list is deleted as given, as delete_many does
    assert not bfs.exists("missing")


def test_create_only_writes_are_file_exists(bfs: BucketFileSystem) -> None:
    bfs.pipe_file("k", b"first")
    with pytest.raises(FileExistsError):
        bfs.pipe_file("k", b"second", mode="create")
    with pytest.raises(FileExistsError):
        bfs.open("k", "xb")
    assert bfs.cat_file("k") == b"first"


def test_bad_input_is_a_typed_error_before_any_request() -> None:
    bucket = counting("bad")
    fs = bucket.fs()
    for call, error in [
        (lambda: fs.cat_file("a/../b"), InvalidKey),
        (lambda: fs.pipe_file("a//b", b"x"), InvalidKey),
        (lambda: fs.open("k", "ab"), InvalidArgument),
        (lambda: fs.open("k", "rb", cache_typo="bytes"), InvalidArgument),
        (lambda: fs.open("k", "wb", colour="blue"), InvalidArgument),
        (lambda: fs.pipe_file("k", b"x", mode="append"), InvalidArgument),
        (lambda: fs.cat_file(""), IsADirectoryError),
    ]:
        with pytest.raises(error):
            call()
    assert sum(chaos_of(bucket).stats.calls.values()) == 0


def test_signing_where_the_provider_cannot(bfs: BucketFileSystem) -> None:
    bfs.pipe_file("k", b"x")
    if bfs.bucket.capabilities.signed_urls:
        assert bfs.sign("k", expiration=60).startswith("http")
    else:
        with pytest.raises(Unsupported):
            bfs.sign("k")


# -- listing and metadata ----------------------------------------------------------------------
def test_ls_info_find_over_implied_directories(bfs: BucketFileSystem) -> None:
    bfs.pipe({"t/a.csv": b"1", "t/p=1/x": b"22", "t/p=2/y": b"333", "u": b""})
    assert bfs.ls("t", detail=False) == ["t/a.csv", "t/p=1", "t/p=2"]
    entries = {e["name"]: e for e in bfs.ls("t")}
    assert entries["t/p=1"]["type"] == "directory"
    assert entries["t/a.csv"]["type"] == "file" and entries["t/a.csv"]["size"] == 1
    assert entries["t/a.csv"]["etag"] and entries["t/a.csv"]["last_modified"] is not None
    assert bfs.info("t/p=2") == {"name": "t/p=2", "size": 0, "type": "directory"}
    assert bfs.info("t/p=2/")["type"] == "directory"  # a trailing slash: a directory, no head
    with pytest.raises(FileNotFoundError):
        bfs.info("t/a.csv/")
    assert bfs.ls("t/p=2/y", detail=False) == ["t/p=2/y"]  # ls of a file: the file
    assert bfs.find("t") == ["t/a.csv", "t/p=1/x", "t/p=2/y"]
    assert bfs.find("t", maxdepth=1) == ["t/a.csv"]
    assert bfs.find("t", withdirs=True) == ["t", "t/a.csv", "t/p=1", "t/p=1/x", "t/p=2", "t/p=2/y"]
    assert bfs.glob("t/p=*/*") == ["t/p=1/x", "t/p=2/y"]
    assert bfs.du("t") == 6
    assert bfs.isdir("t") and not bfs.isfile("t") and bfs.isfile("u") and not bfs.isdir("u")


def test_a_server_refusing_heads_on_folders_still_has_directories(s3s_server: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """s3s-fs answers a head on a key that is one of its folders with a 500 (not a 404)."""
    import boto3

    for name, value in s3s_server.env.items():
        monkeypatch.setenv(name, value)
    endpoint = s3s_server.endpoints["endpoint_url"]
    name = f"pt-fs-{uuid.uuid4().hex[:10]}"
    boto3.client(  # the keys given: boto3's default session keeps the first ones it resolved in this process
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3s_server.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3s_server.env["AWS_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=name)
    fs = open_bucket(f"s3://{name}?region=us-east-1&endpoint_url={endpoint}", policy=QUICK_RETRIES).fs()
    fs.pipe_file("ds/p=1/f.parquet", b"x")
    with pytest.raises(PortableError) as refused:  # the server's quirk this test is about
        fs.bucket.head("ds")
    assert not isinstance(refused.value, NotFound)
    assert fs.info("ds")["type"] == "directory"
    assert fs.isdir("ds/p=1") and fs.find("ds") == ["ds/p=1/f.parquet"]


def test_directories_come_and_go_with_their_objects(bfs: BucketFileSystem) -> None:
    bfs.makedirs("empty/dir")
    bfs.mkdir("empty2")
    assert not bfs.exists("empty/dir") and not bfs.exists("empty2")
    bfs.pipe_file("d/k", b"x")
    with pytest.raises(OSError, match="not empty"):
        bfs.rmdir("d")
    bfs.rm("d", recursive=True)
    assert not bfs.exists("d")
    bfs.rmdir("d")  # nothing under it: nothing to do


def test_modified_ukey_and_checksum_follow_the_object(bfs: BucketFileSystem) -> None:
    bfs.pipe_file("k", b"one")
    first_key, first_sum = bfs.ukey("k"), bfs.checksum("k")
    assert bfs.modified("k").tzinfo is not None
    bfs.pipe_file("k", b"two, longer")
    assert bfs.ukey("k") != first_key and bfs.checksum("k") != first_sum
    with pytest.raises(NotImplementedError):
        bfs.created("k")


# -- reads -------------------------------------------------------------------------------------
def test_ranged_reads(bfs: BucketFileSystem) -> None:
    data = body(100_000)
    bfs.pipe_file("r", data)
    assert bfs.cat_file("r", 10, 20) == data[10:20]
    assert bfs.cat_file("r", -100) == data[-100:]
    assert bfs.cat_file("r", 5, -5) == data[5:-5]
    assert bfs.cat_file("r", 99_990, 200_000) == data[99_990:]
    assert bfs.cat_file("r", 50, 50) == b""
    assert bfs.read_block("r", 1000, 500) == data[1000:1500]
    with bfs.open("r", "rb", block_size=4096) as f:
        assert isinstance(f, BucketFile)
        f.seek(-10, 2)
        assert f.read() == data[-10:]
        f.seek(123)
        assert f.read(1000) == data[123:1123]
    got = bfs.cat_ranges(["r", "r", "missing", "r"], [0, 50_000, 0, -3], [5, 50_010, 1, None])
    assert got[0] == data[:5] and got[1] == data[50_000:50_010] and got[3] == data[-3:]
    assert isinstance(got[2], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        bfs.cat_ranges(["r", "missing"], 0, 1, on_error="raise")


def test_a_large_read_runs_as_concurrent_ranged_gets() -> None:
    bucket = counting("large")
    fs = bucket.fs()
    data = body(20 * 1024 * 1024 + 5)
    fs.pipe_file("big", data)
    calls = chaos_of(bucket).stats.calls
    calls.clear()
    with fs.open("big", "rb") as f:
        assert f.read() == data
    assert calls["get_range"] == 3, calls  # 8 + 8 + 4 MiB, at once
    calls.clear()
    with BucketFileSystem(bucket=bucket, max_concurrency=1).open("big", "rb") as f:
        assert f.read() == data
    assert calls["get_range"] == 1, calls


def test_cat_of_many_files(bfs: BucketFileSystem) -> None:
    bfs.pipe({f"m/{i}": body(100 + i, i) for i in range(12)})
    got = bfs.cat("m/*")
    assert got == {f"m/{i}": body(100 + i, i) for i in range(12)}


def test_a_parquet_footer_costs_one_ranged_get() -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="a dev dependency (pip install -e '.[dev]')")
    pa = pytest.importorskip("pyarrow", reason="a dev dependency (pip install -e '.[dev]')")
    bucket = counting("parquet")
    fs = bucket.fs()
    table = pa.table({"i": list(range(200_000)), "s": [str(i) for i in range(200_000)]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    fs.pipe_file("t.parquet", sink.getvalue())
    assert len(sink.getvalue()) < DEFAULT_BLOCK_SIZE
    calls = chaos_of(bucket).stats.calls
    calls.clear()
    with fs.open("t.parquet", "rb") as f:
        metadata = pq.ParquetFile(f).metadata
    assert metadata.num_rows == 200_000
    assert calls["get_range"] == 1 and calls["head"] == 1, calls
    calls.clear()
    assert pq.read_table("t.parquet", filesystem=fs).equals(table)
    # the footer, then the whole rest in one read-ahead block (the file is under one block)
    assert calls["get_range"] <= 2, calls


# -- the listings cache ------------------------------------------------------------------------
def test_a_dataset_read_after_its_listing_sends_no_head() -> None:
    """pyarrow asks ``isfile`` and opens every file that dataset discovery just listed: with the
    listing kept, that costs no head (s3fs's behaviour), only the ranged gets of the data."""
    pq = pytest.importorskip("pyarrow.parquet", reason="a dev dependency (pip install -e '.[dev]')")
    pa = pytest.importorskip("pyarrow", reason="a dev dependency (pip install -e '.[dev]')")
    bucket = counting("dataset")
    fs = bucket.fs()
    tables = {f"ds/p={i}/part.parquet": pa.table({"i": list(range(i * 10, i * 10 + 10))}) for i in range(5)}
    for key, table in tables.items():
        sink = io.BytesIO()
        pq.write_table(table, sink)
        fs.pipe_file(key, sink.getvalue())
    calls = chaos_of(bucket).stats.calls
    calls.clear()
    assert fs.find("ds") == sorted(tables)
    for key, table in tables.items():
        assert fs.isfile(key) and not fs.isdir(key) and fs.isdir(key.rsplit("/", 1)[0])
        assert fs.info(key)["size"] == fs.size(key) > 0
        with fs.open(key, "rb") as f:
            assert pq.read_table(f).equals(table)
    assert calls["head"] == 0 and calls["list"] == 1 and calls["get_range"] == len(tables), calls
    assert not fs.exists("ds/p=0/missing.parquet") and not fs.isfile("ds/p=9")
    assert calls["head"] == 0, "a folder listed in full answers for what it lacks"


def test_own_writes_and_deletes_drop_the_kept_listing() -> None:
    bucket = counting("own")
    fs = bucket.fs()
    fs.pipe({"d/a": b"1", "d/b": b"22"})
    assert fs.ls("d", detail=False) == ["d/a", "d/b"]
    fs.pipe_file("d/c", b"333")
    assert fs.ls("d", detail=False) == ["d/a", "d/b", "d/c"]
    with fs.open("d/e/f", "wb") as f:
        f.write(b"4444")
    assert fs.find("d") == ["d/a", "d/b", "d/c", "d/e/f"]
    assert fs.info("d/e/f")["size"] == 4
    fs.rm("d/a")
    assert not fs.exists("d/a") and fs.ls("d", detail=False) == ["d/b", "d/c", "d/e"]
    fs.cp_file("d/b", "d/g")
    assert fs.cat_file("d/g") == b"22" and "d/g" in fs.ls("d", detail=False)
    with fs.open("d/b", "wb") as f:
        f.write(b"longer now")
    assert fs.info("d/b")["size"] == 10 and fs.cat_file("d/b") == b"longer now"


def test_another_writer_shows_after_invalidate_or_expiry() -> None:
    bucket = counting("other")
    fs = BucketFileSystem(bucket=bucket, listings_expiry_time=600)
    fs.pipe_file("x/a", b"1")
    assert fs.ls("x", detail=False) == ["x/a"]
    bucket.put("x/b", b"2")  # not through this file system
    assert fs.ls("x", detail=False) == ["x/a"], "kept for listings_expiry_time"
    fs.invalidate_cache("x/a")
    assert fs.ls("x", detail=False) == ["x/a", "x/b"]
    bucket.put("x/c", b"3")
    assert fs.ls("x", detail=False, refresh=True)[-1] == "x/c"
    brief = BucketFileSystem(bucket=bucket, listings_expiry_time=0.2)
    assert brief.ls("x", detail=False) == ["x/a", "x/b", "x/c"]
    bucket.put("x/d", b"4")
    time.sleep(0.3)
    assert brief.ls("x", detail=False) == ["x/a", "x/b", "x/c", "x/d"], "expired"
    uncached = BucketFileSystem(bucket=bucket, use_listings_cache=False)
    uncached.ls("x")
    calls = chaos_of(bucket).stats.calls
    calls.clear()
    assert uncached.info("x/a")["size"] == 1 and calls["head"] == 1


@pytest.mark.parametrize(
    "option", [{"use_listings_cache": "yes"}, {"listings_expiry_time": 0}, {"listings_expiry_time": "1"},
               {"max_paths": 0}],
)
def test_bad_listings_cache_options_are_refused(option: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        BucketFileSystem(bucket=counting("bad-cache"), **option)


# -- writes ------------------------------------------------------------------------------------
def test_streamed_write_is_visible_only_when_closed(bfs: BucketFileSystem) -> None:
    data = body(3 * 1024 * 1024 + 17)
    f = bfs.open("w/big", "wb", block_size=1024 * 1024)
    f.write(data[: 2 * 1024 * 1024])
    assert not bfs.exists("w/big")
    f.write(data[2 * 1024 * 1024 :])
    f.close()
    assert bfs.cat_file("w/big") == data
    with bfs.open("w/typed", "wb", content_type="text/csv") as g:
        g.write(b"a,b\n")
    assert bfs.info("w/typed")["content_type"] == "text/csv"


def test_a_failed_write_leaves_nothing(bfs: BucketFileSystem) -> None:
    with pytest.raises(RuntimeError), bfs.open("w/failed", "wb", block_size=1024) as f:
        f.write(body(10_000))
        raise RuntimeError("the producer failed")
    assert not bfs.exists("w/failed")
    g = bfs.open("w/dropped", "wb")
    g.write(b"never closed")
    del g
    gc.collect()
    assert not bfs.exists("w/dropped")
    bfs.pipe_file("w/kept", b"old")
    with pytest.raises(RuntimeError), bfs.open("w/kept", "wb") as h:
        h.write(b"new")
        raise RuntimeError
    assert bfs.cat_file("w/kept") == b"old"


def test_a_transaction_commits_at_its_end(bfs: BucketFileSystem) -> None:
    with bfs.transaction:
        with bfs.open("tx/a", "wb") as f:
            f.write(b"a")
        assert not bfs.exists("tx/a")
    assert bfs.cat_file("tx/a") == b"a"


def test_put_get_copy_and_move(bfs: BucketFileSystem, tmp_path: Path) -> None:
    local = tmp_path / "local.bin"
    local.write_bytes(body(5000))
    bfs.put_file(str(local), "p/remote.bin")
    bfs.copy("p/remote.bin", "p/copy.bin")
    bfs.mv("p/copy.bin", "p/moved.bin")
    assert not bfs.exists("p/copy.bin")
    bfs.get_file("p/moved.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == body(5000)


# -- the retry layer ---------------------------------------------------------------------------
def test_reads_through_injected_faults_return_identical_bytes() -> None:
    """chaos+ fails 20% of the calls to the provider; the Bucket's retries hide every one."""
    bucket = open_bucket(f"chaos+mem://chaotic-{uuid.uuid4().hex[:8]}?seed=3&error_rate=0.2", policy=QUICK_RETRIES)
    fs = bucket.fs()
    objects = {f"c/part-{i}.bin": body(30_000 + i, i) for i in range(30)}
    fs.pipe(objects)
    for key, data in objects.items():
        fs.pipe_file(key + ".copy", data)
    assert fs.find("c") == sorted([*objects, *(k + ".copy" for k in objects)])
    assert fs.cat(sorted(objects)) == objects
    for key, data in objects.items():
        with fs.open(key, "rb", block_size=4096) as f:
            assert f.read() == data
        assert fs.cat_file(key + ".copy", 100, 200) == data[100:200]
    keys = sorted(objects)
    got = fs.cat_ranges(keys, 1000, 3000, on_error="raise")
    assert got == [objects[k][1000:3000] for k in keys]
    injected = chaos_of(bucket).stats.injected
    assert sum(injected.values()) > 20, injected


# -- docs/fsspec.md runs -----------------------------------------------------------------------
def _page_blocks() -> list[Any]:
    from tests.docs_pages import DOCS, blocks

    return blocks(DOCS / "fsspec.md", "python")


@pytest.mark.parametrize("block", _page_blocks(), ids=lambda b: f"line{b.line}")
def test_the_docs_page_examples_run(block: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas", reason="a dev dependency (pip install -e '.[dev]')")
    pytest.importorskip("polars", reason="a dev dependency (pip install -e '.[dev]')")
    from tests.docs_pages import DOCS, enter_workdir, run_block

    enter_workdir(DOCS / "fsspec.md", tmp_path, monkeypatch)
    run_block(DOCS / "fsspec.md", block)


def test_without_fsspec_the_bridge_names_the_extra() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['fsspec'] = None\n"
        "import portable.storage\n"
        "from portable.errors import MissingDependency\n"
        "bucket = portable.storage.open_bucket('mem://no-fsspec')\n"
        "for attempt in (lambda: __import__('portable.fsspec'), bucket.fs):\n"
        "    try:\n"
        "        attempt()\n"
        "    except MissingDependency as err:\n"
        "        print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all("portable-cloud[fsspec]" in line for line in lines), out
