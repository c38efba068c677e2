"""Listing at scale on file:// and mem://: key order across nested folders, tokens under concurrent
writes, and what a page costs (entries read, memory), counted rather than timed.

A file:// folder is read in hash order, so the first page of a sorted listing reads the folder
whole; the promise is about the rest: later pages do not read it again while it is unchanged, a
page of a tree reads only the folders it needs, and a folder too big to sort in memory is sorted
in runs on disk. mem:// keeps an ordered index, so a page is a binary search and a slice.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portable.embedded import _filelist
from portable.embedded.memory import MemoryStorage
from portable.storage import Bucket, open_bucket

ODD_KEYS = [
    "a", "a-b", "a.txt", "a0", "a b", "A", "ab", "a~", "é", "日本/語", "z/é/x", "z/e/x", "z/e-x", "z/e0",
    "b/b-c", "b/b0", "b/b/c", "b/b/c-d", "b/b/c0", "b/c/d/e/f", "b/c/d/e-f", "b/c-", "b/c0/x", "emoji 😀",
    "x\u00ff", "x\u0100", "x\U0001f600", "x\uffee", "tab=name", "q/ /r", "q/!/r", "q/~/r",
]


@pytest.fixture(autouse=True)
def fresh_snapshots() -> Iterator[None]:
    _filelist._CACHE.clear()
    yield
    _filelist._CACHE.clear()


@pytest.fixture(params=["file", "mem"])
def bucket(request: pytest.FixtureRequest, tmp_path: Path) -> Bucket:
    return open_bucket(f"file://{tmp_path / 'b'}" if request.param == "file" else "mem://")


def random_keys(seed: int, count: int) -> list[str]:
    """Keys over an alphabet that sorts around '/', none a folder of another (file:// cannot hold both)."""
    rng = random.Random(seed)
    alphabet = ["a", "b", "-", "0", ".", "é", " ", "~", "A"]
    keys: set[str] = set()
    while len(keys) < count:
        segs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 4))]
        if any(s in (".", "..") or s.startswith(".portable") for s in segs):
            continue
        key = "/".join(segs)
        if any(k.startswith(key + "/") or key.startswith(k + "/") for k in keys):
            continue
        keys.add(key)
    return list(keys)


def folded(keys: list[str], prefix: str) -> list[str]:
    """What a '/'-delimited listing of ``keys`` under ``prefix`` returns, from sorted()."""
    out: list[str] = []
    for key in sorted(k for k in keys if k.startswith(prefix)):
        cut = key.find("/", len(prefix))
        entry = key if cut < 0 else key[: cut + 1]
        if not out or out[-1] != entry:
            out.append(entry)
    return out


# -- order ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("page_size", [1, 3, 1000])
def test_odd_keys_list_in_sorted_order_at_every_page_size(bucket: Bucket, page_size: int) -> None:
    bucket.put_many({k: b"x" for k in ODD_KEYS})
    assert [e.key for e in bucket.list(page_size=page_size)] == sorted(ODD_KEYS)
    for prefix in ["a", "b/", "b/b", "b/c", "z/e", "x", "q/"]:
        want = sorted(k for k in ODD_KEYS if k.startswith(prefix))
        assert [e.key for e in bucket.list(prefix, page_size=page_size)] == want, prefix
        assert [e.key for e in bucket.list(prefix, delimiter="/", page_size=page_size)] == folded(ODD_KEYS, prefix)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_nested_trees_list_as_sorted_does(bucket: Bucket, seed: int) -> None:
    keys = random_keys(seed, 300)
    bucket.put_many({k: b"" for k in keys})
    assert [e.key for e in bucket.list(page_size=7)] == sorted(keys)
    assert [e.key for e in bucket.list(delimiter="/", page_size=5)] == folded(keys, "")
    rng = random.Random(seed)
    for after in [*rng.sample(sorted(keys), 10), "a/", "a-", "b0", "", "~~"]:
        want = [k for k in sorted(keys) if k > after]
        assert [e.key for e in bucket.list(start_after=after, page_size=9)] == want, after


def test_a_spilled_folder_lists_in_order_and_resumes_by_binary_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_filelist, "RUN_NAMES", 50)  # 1,000 names: 20 runs merged on disk
    root = tmp_path / "b"
    keys = sorted({f"{random.Random(i).choice(['a', 'a-', 'a0', 'é', 'b'])}{i}" for i in range(1000)})
    write_files(root, keys)
    bucket = open_bucket(f"file://{root}")
    assert [e.key for e in bucket.list(page_size=33)] == keys
    for after in [keys[0], keys[499], keys[-1], "a", "a-", "zz", ""]:
        assert [e.key for e in bucket.list(start_after=after, page_size=100)] == [k for k in keys if k > after]


# -- tokens under concurrent writes --------------------------------------------------------------
def test_a_token_resumes_while_keys_are_added_and_deleted(bucket: Bucket) -> None:
    keys = [f"k/{i:04d}" for i in range(600)]
    bucket.put_many({k: b"." for k in keys})
    rng = random.Random(7)
    deleted: set[str] = set()
    added: set[str] = set()
    seen: list[str] = []
    token: str | None = None
    while True:
        page = bucket.list_page("k/", page_size=50, token=token)
        seen.extend(o.key for o in page.objects)
        if page.next_token is None:
            break
        token = page.next_token
        for key in rng.sample(keys, 10):  # both sides of the cursor
            bucket.delete(key)
            deleted.add(key)
        for _ in range(10):
            key = f"k/{rng.randrange(600):04d}-new"
            bucket.put(key, b"+")
            added.add(key)
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    throughout = set(keys) - deleted
    assert throughout <= set(seen), sorted(throughout - set(seen))[:5]
    assert set(seen) <= set(keys) | added


def test_a_listing_under_a_concurrent_writer_returns_every_lasting_key_once(bucket: Bucket) -> None:
    lasting = [f"w/{i:04d}" for i in range(0, 1000, 2)]
    bucket.put_many({k: b"." for k in lasting})
    stop = threading.Event()

    def churn() -> None:
        rng = random.Random(3)
        while not stop.is_set():
            key = f"w/{rng.randrange(1, 1000, 2):04d}"
            bucket.put(key, b"~")
            bucket.delete(key)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        listed = [e.key for e in bucket.list("w/", page_size=40)]
    finally:
        stop.set()
        writer.join()
    assert listed == sorted(listed) and len(listed) == len(set(listed))
    assert set(lasting) <= set(listed)


# -- what a page costs ---------------------------------------------------------------------------
def write_files(root: Path, keys: list[str]) -> None:
    """Objects written straight to disk (fast), then aged past the racy window so snapshots are kept."""
    folders: dict[str, int] = {}
    try:
        for key in keys:
            folder, _, name = key.rpartition("/")
            if folder not in folders:
                (root / folder).mkdir(parents=True, exist_ok=True)
                folders[folder] = os.open(root / folder, os.O_RDONLY | os.O_DIRECTORY)
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=folders[folder]))
    finally:
        for fd in folders.values():
            os.close(fd)
    time.sleep(_filelist.RACY_NS / 1e9 + 0.05)


class ScandirCounter:
    """os.scandir, counting the entries read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entries = 0
        real = os.scandir
        counter = self

        class Counted:
            def __init__(self, fd: int) -> None:
                self._it = real(fd)

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                self._it.close()

            def __iter__(self) -> Iterator[os.DirEntry[str]]:
                for entry in self._it:
                    counter.entries += 1
                    yield entry

        monkeypatch.setattr(os, "scandir", Counted)


def test_paging_a_flat_folder_reads_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"f{i:05d}" for i in range(20_000)]
    write_files(tmp_path / "b", keys)
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    counter = ScandirCounter(monkeypatch)
    first = bucket.list_page(page_size=1000)
    assert counter.entries == 20_000  # hash order: the first page must read the folder
    assert [o.key for o in first.objects] == keys[:1000]
    listed = [e.key for e in bucket.list(page_size=1000)]
    assert listed == keys
    assert counter.entries == 20_000, "a later page read the folder again"


def test_a_page_of_a_tree_reads_only_the_folders_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"d{d:02d}/f{i:04d}" for d in range(10) for i in range(500)]
    write_files(tmp_path / "b", keys)
    bucket = open_bucket(f"file://{tmp_path / 'b'}")
    counter = ScandirCounter(monkeypatch)
    page = bucket.list_page(page_size=250)
    assert [o.key for o in page.objects] == keys[:250]
    assert counter.entries == 10 + 500, counter.entries  # the root and d00/, not the other 4,500
    page = bucket.list_page(page_size=250, token=page.next_token)
    assert [o.key for o in page.objects] == keys[250:500]
    assert counter.entries == 10 + 500 + 500, counter.entries  # d01/ read for the key that says "more"
    page = bucket.list_page(page_size=250, token=page.next_token)
    assert [o.key for o in page.objects] == keys[500:750]
    assert counter.entries == 10 + 500 + 500, counter.entries  # d01/ not read again
    folders = bucket.list_page(delimiter="/", page_size=1000)
    assert folders.prefixes == [f"d{d:02d}/" for d in range(10)]


def test_a_folder_bigger_than_a_run_is_listed_in_flat_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def peak_of_a_listing(count: int) -> tuple[int, int]:
        """Peak Python memory of listing ``count`` keys, sorted in runs and (runs unbounded) in memory."""
        root = tmp_path / str(count)
        write_files(root, [f"object-with-a-longish-name-{i:06d}" for i in range(count)])
        bucket = open_bucket(f"file://{root}")
        peaks = []
        for run in (125, 10**9):  # 32 runs and 160: the merge's fan-in is bounded too
            monkeypatch.setattr(_filelist, "RUN_NAMES", run)
            _filelist._CACHE.clear()
            tracemalloc.start()
            try:
                assert sum(1 for _ in bucket.list(page_size=1000)) == count
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
        return peaks[0], peaks[1]

    small_runs, small_whole = peak_of_a_listing(4_000)
    big_runs, big_whole = peak_of_a_listing(20_000)
    assert big_whole > 2 * small_whole, (small_whole, big_whole)  # the measure sees a folder sorted whole
    assert big_runs < 1.5 * small_runs, (small_runs, big_runs)  # in runs: flat as the folder grows
    assert big_runs < big_whole / 2, (big_runs, big_whole)


def test_mem_pages_are_slices_of_one_index(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = MemoryStorage()
    bucket = Bucket(driver)
    keys = [f"m/{i:05d}" for i in range(20_000)]
    bucket.put_many({k: b"" for k in keys})
    store = driver._store
    fetched: list[int] = []
    real = type(store).keys_from

    def counted(self: object, lower: str, inclusive: bool, count: int) -> list[str]:
        out = real(store, lower, inclusive, count)
        fetched.append(len(out))
        return out

    monkeypatch.setattr(type(store), "keys_from", counted)
    assert [e.key for e in bucket.list(page_size=1000)] == keys
    index = store.sorted_keys
    assert sum(fetched) <= 20_000 + 20, sum(fetched)  # each page reads its keys and one more
    assert [e.key for e in bucket.list(page_size=1000)] == keys
    assert store.sorted_keys is index, "a listing rebuilt the index"
    fetched.clear()
    nested = {f"n/{d:03d}/{i:03d}": b"" for d in range(100) for i in range(200)}
    bucket.put_many(nested)
    assert [e.key for e in bucket.list("n/", delimiter="/", page_size=1000)] == [f"n/{d:03d}/" for d in range(100)]
    assert sum(fetched) <= 2 * 1000 + 2, sum(fetched)  # a folded prefix is stepped over, not read


# -- S3: a listing reads one page at a time ------------------------------------------------------
@pytest.fixture(scope="module")
def s3s_bucket_url(s3s_server: Any) -> Iterator[str]:
    """A bucket on s3s-fs (a real S3 server), its credentials in the environment while this module runs."""
    import boto3
    from botocore.config import Config

    endpoint, region = s3s_server.endpoints["endpoint_url"], s3s_server.endpoints["region"]
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, s3s_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        name = f"ls-{uuid.uuid4().hex[:12]}"
        # a session of its own: boto3's default session keeps the credentials it resolved first,
        # which may be another module's (the test order, or another xdist worker's files, decides)
        boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region,
                                       config=Config(s3={"addressing_style": "path"})).create_bucket(Bucket=name)
        yield f"s3://{name}/{{prefix}}?region={region}&endpoint_url={endpoint}&engine={{engine}}"


#: s3s-fs answers each listing request with up to 1,000 keys (obstore asks for no fewer), slowly: a small tree
S3_KEYS = [f"big/{i:04d}" for i in range(1100)] + [f"f{i:04d}" for i in range(40)] + ["a-b", "a/x", "a0"]


@pytest.fixture(scope="module")
def s3_root(s3s_bucket_url: str) -> str:
    bucket = open_bucket(s3s_bucket_url.format(prefix="tree", engine="obstore"))
    bucket.put_many({k: b"" for k in S3_KEYS})
    return s3s_bucket_url.format(prefix="tree", engine="{engine}")


@pytest.mark.parametrize("engine", ["obstore", "fsspec"])
def test_s3_pages_of_a_thousand_list_every_key_once_in_order(s3_root: str, engine: str) -> None:
    bucket = open_bucket(s3_root.format(engine=engine))
    sizes: list[int] = []
    listed: list[str] = []
    token: str | None = None
    while True:
        page = bucket.list_page(page_size=1000, token=token)
        sizes.append(len(page.objects))
        listed += [o.key for o in page.objects]
        if page.next_token is None:
            break
        token = page.next_token
    assert listed == sorted(S3_KEYS)
    assert all(0 < s <= 1000 for s in sizes) and len(sizes) == 2, sizes
    if engine == "obstore":  # a page that ends where its request did holds 999: no request to look ahead
        assert sizes[0] == 999, sizes


@pytest.mark.parametrize("engine", ["obstore", "fsspec"])
@pytest.mark.parametrize("page_size", [3, 1000])
def test_s3_delimited_pages_step_over_a_big_folded_prefix(s3_root: str, engine: str, page_size: int) -> None:
    bucket = open_bucket(s3_root.format(engine=engine))
    want = folded(S3_KEYS, "")
    assert want[:4] == ["a-b", "a/", "a0", "big/"]
    assert [e.key for e in bucket.list(delimiter="/", page_size=page_size)] == want
    under = [e.key for e in bucket.list("big/", delimiter="/", page_size=1000)]
    assert under == [k for k in S3_KEYS if k.startswith("big/")]


@pytest.mark.parametrize("spilled", [0, 4, 10, 11])  # 10 runs, then the merge's two files
def test_without_temporary_space_a_big_folder_is_sorted_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spilled: int
) -> None:
    monkeypatch.setattr(_filelist, "RUN_NAMES", 100)
    keys = sorted(f"k{i}" for i in range(1000))
    write_files(tmp_path / "b", keys)
    made = 0
    real = tempfile.TemporaryFile

    def fails_after_some(*args: Any, **kwargs: Any) -> Any:
        nonlocal made
        made += 1
        if made > spilled:  # some files made, then the temporary folder is full
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", fails_after_some)
    assert [e.key for e in open_bucket(f"file://{tmp_path / 'b'}").list(page_size=300)] == keys
    assert made > spilled


@pytest.mark.parametrize("kind", ["mem", "file"])
def test_a_listing_after_random_puts_and_deletes_is_exactly_the_live_keys(kind: str, tmp_path: Path) -> None:
    """Keys deleted and stored again, listed between changes, appear once each (the mem:// index
    once listed a deleted-then-restored key twice)."""
    url = f"mem://relist-{uuid.uuid4().hex[:8]}" if kind == "mem" else f"file://{tmp_path / 'relist'}"
    bucket = open_bucket(url)
    keys = [f"d{i % 3}/k{i:03d}" for i in range(150)]
    live: set[str] = set()
    rng = random.Random(7)
    for step in range(1500):
        key = rng.choice(keys)
        if rng.random() < 0.5:
            bucket.put(key, b"x")
            live.add(key)
        else:
            bucket.delete(key)
            live.discard(key)
        if step % 29 == 0:
            assert [o.key for o in bucket.list("", page_size=7)] == sorted(live), step
