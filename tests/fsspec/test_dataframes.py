"""pandas, pyarrow.dataset, Dask and Polars through ``portable://`` (BucketFileSystem), on mem:// and moto.

Each data tool writes and reads through the fsspec bridge in the ways its users
write it: a ``portable://PROFILE/key`` URL (the profile comes from a temporary
``PORTABLE_CONFIG``), ``storage_options={"url": ...}``, and a file system from
``bucket.fs()`` passed as ``filesystem=``. What was written is then checked in
the bucket itself, through the Bucket API, so a test cannot pass by writing
somewhere else. mem:// buckets with one NAME share their objects within the
process, so the profile's bucket, the test's own Bucket and the chaos wrapper
all see the same objects.

Then the same reads go through ``chaos+`` (portable/testing/chaos.py) with 20%
of the calls to the provider failing transiently (throttling, 503, connection
resets, timeouts): the frames must come back identical, and the wrapper's own
counters must show that faults were injected, so the retry layer, not luck,
made them equal.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import polars as pl
import polars.testing
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyarrow.fs import FSSpecHandler, PyFileSystem

from portable.storage import Bucket, open_bucket
from portable.testing.chaos import chaos_of

pytestmark = pytest.mark.filterwarnings(
    # Dask 2026.8.0's own parquet reader (dask/dataframe/io/parquet/arrow.py) calls
    # reset_index(inplace=True), which pandas 3.1 deprecates; nothing here asks for it
    "ignore:The inplace keyword in DataFrame.reset_index is deprecated:DeprecationWarning:dask",
)

#: every call to the provider through a chaos+ URL meets a transient fault with this chance
FAULT_RATE = 0.2
#: retries quick enough for a test, and enough of them that 20% faults never exhaust them
QUICK_RESILIENCE = {"max_attempts": 10, "initial_backoff": 0.001, "max_backoff": 0.01}
ROWS = 4000
PARTS = ("alpha", "beta", "gamma", "delta")


# ---------------------------------------------------------------- data
def frame(rows: int = ROWS) -> pd.DataFrame:
    """A frame with the column types data tools care about (ints, floats, strings, bools, times)."""
    rng = np.random.default_rng(18)
    ids = np.arange(rows, dtype="int64")
    return pd.DataFrame(
        {
            "id": ids,
            "part": np.array(PARTS)[ids % len(PARTS)],
            "x": rng.standard_normal(rows),
            "name": [f"row-{i:05d}" for i in range(rows)],
            "ok": ids % 3 == 0,
            "when": pd.date_range("2026-01-01", periods=rows, freq="min", tz="UTC"),
        }
    )


def csv_frame(rows: int = ROWS) -> pd.DataFrame:
    """The frame without its times: CSV carries them as text, which is not what these tests are about."""
    return frame(rows).drop(columns=["when"])


def read_csv_bytes(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data))


def keys_under(bucket: Bucket, prefix: str) -> list[str]:
    """The keys under ``prefix``, listed through the Bucket API (not the bridge)."""
    return sorted(info.key for info in bucket.list(prefix))


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id", kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- stores
@dataclass
class Store:
    """One bucket seen several ways: its URL, a profile naming it, and the chaos+ twins of both."""

    kind: str
    url: str
    chaos_url: str
    profile: str
    chaos_profile: str
    bucket: Bucket

    def portable_url(self, key: str, *, chaos: bool = False) -> str:
        """``portable://PROFILE/key``: the profile names the bucket."""
        return f"portable://{self.chaos_profile if chaos else self.profile}/{key}"

    def url_options(self, *, chaos: bool = False) -> dict[str, Any]:
        """``storage_options`` naming the bucket by URL, for ``portable:///key`` paths; spelled
        ``bucket_url`` because pandas and Dask call ``fsspec.core.url_to_fs(url, **storage_options)``."""
        return {"bucket_url": self.chaos_url if chaos else self.url}

    def open_chaos(self, seed: int = 18) -> Bucket:
        """A chaos+ Bucket over the same objects, with the chaos profile's quick retries."""
        return open_bucket(chaos_url(self.url, seed), profile=self.chaos_profile)


def chaos_url(url: str, seed: int = 18) -> str:
    """``url`` behind the fault injector: FAULT_RATE of the calls fail, reproducibly per ``seed``."""
    sep = "&" if "?" in url else "?"
    return f"chaos+{url}{sep}seed={seed}&error_rate={FAULT_RATE}"


@pytest.fixture(scope="module")
def moto_s3(moto_server: Any) -> Iterator[dict[str, str]]:
    """moto's S3 with its credentials in the environment while this module runs, and one bucket."""
    import boto3
    from botocore.config import Config

    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
            mp.setenv(name, moto_server.env[name])
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        endpoint, region = moto_server.endpoints["endpoint_url"], moto_server.endpoints["region"]
        name = f"pt-df-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=endpoint, region_name=region,
                     config=Config(s3={"addressing_style": "path"})).create_bucket(Bucket=name)
        yield {"endpoint_url": endpoint, "region": region, "bucket": name}


def write_config(path: Path, profiles: dict[str, str]) -> None:
    lines = []
    for name, url in profiles.items():
        lines += [f"[profiles.{name}]", f'storage = "{url}"', f"[profiles.{name}.resilience]"]
        lines += [f"{k} = {v}" for k, v in QUICK_RESILIENCE.items()]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(params=["mem", "moto-obstore", "moto-fsspec"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A fresh bucket (mem://, or a fresh prefix of one moto bucket on either s3:// engine) and a
    config naming it twice (plain and chaos+)."""
    run = uuid.uuid4().hex[:10]
    if request.param == "mem":
        url = f"mem://df-{run}"
    else:
        s3 = request.getfixturevalue("moto_s3")
        engine = request.param.removeprefix("moto-")
        url = f"s3://{s3['bucket']}/{run}?engine={engine}&region={s3['region']}&endpoint_url={s3['endpoint_url']}"
    # unique profile names: fsspec caches file systems by their arguments, so a name reused
    # by another test (with another bucket behind it) must not hand back that test's bucket
    profile, chaos_profile = f"df{run}", f"dfchaos{run}"
    config = tmp_path / "portable.toml"
    write_config(config, {profile: url, chaos_profile: chaos_url(url)})
    monkeypatch.setenv("PORTABLE_CONFIG", str(config))
    monkeypatch.delenv("PORTABLE_PROFILE", raising=False)
    monkeypatch.delenv("PORTABLE_STORAGE_URL", raising=False)
    bucket = open_bucket(url, profile=profile)
    try:
        yield Store(request.param, url, chaos_url(url), profile, chaos_profile, bucket)
    finally:
        bucket.close()


def assert_faults_were_injected(bucket: Bucket, at_least: int = 1) -> None:
    stats = chaos_of(bucket).stats
    total = sum(stats.injected.values())
    assert total >= at_least, (
        f"{total} faults injected, fewer than {at_least} (calls: {dict(stats.calls)}): the test would prove little"
    )


# ---------------------------------------------------------------- pandas
def test_pandas_parquet_through_a_profile_url(store: Store) -> None:
    df = frame()
    df.to_parquet(store.portable_url("tables/x.parquet"))
    assert_frame_equal_in_bucket(store.bucket, "tables/x.parquet", df)
    pd.testing.assert_frame_equal(pd.read_parquet(store.portable_url("tables/x.parquet")), df)


def test_pandas_parquet_through_storage_options(store: Store) -> None:
    df = frame()
    df.to_parquet("portable:///tables/so.parquet", storage_options=store.url_options())
    assert_frame_equal_in_bucket(store.bucket, "tables/so.parquet", df)
    got = pd.read_parquet("portable:///tables/so.parquet", storage_options=store.url_options())
    pd.testing.assert_frame_equal(got, df)


def test_pandas_parquet_through_bucket_fs(store: Store) -> None:
    df = frame()
    fs = store.bucket.fs()
    df.to_parquet("tables/fs.parquet", filesystem=fs)
    assert_frame_equal_in_bucket(store.bucket, "tables/fs.parquet", df)
    pd.testing.assert_frame_equal(pd.read_parquet("tables/fs.parquet", filesystem=fs), df)
    pd.testing.assert_frame_equal(pd.read_parquet("tables/fs.parquet", filesystem=fs, columns=["id", "name"]),
                                  df[["id", "name"]])


def test_pandas_csv_through_a_profile_url_and_storage_options(store: Store) -> None:
    df = csv_frame()
    df.to_csv(store.portable_url("csv/x.csv"), index=False)
    assert store.bucket.get("csv/x.csv") == df.to_csv(index=False).encode()
    expected = read_csv_bytes(store.bucket.get("csv/x.csv"))
    pd.testing.assert_frame_equal(expected, df)
    got = pd.read_csv(store.portable_url("csv/x.csv"))
    pd.testing.assert_frame_equal(got, expected)

    df.to_csv("portable:///csv/so.csv", index=False, storage_options=store.url_options())
    assert store.bucket.get("csv/so.csv") == df.to_csv(index=False).encode()
    got = pd.read_csv("portable:///csv/so.csv", storage_options=store.url_options())
    pd.testing.assert_frame_equal(got, expected)


def test_pandas_csv_through_fs_open(store: Store) -> None:
    df = csv_frame()
    fs = store.bucket.fs()
    with fs.open("csv/fs.csv", "w") as fh:
        df.to_csv(fh, index=False)
    assert store.bucket.get("csv/fs.csv") == df.to_csv(index=False).encode()
    with fs.open("csv/fs.csv", "rb") as fh:
        pd.testing.assert_frame_equal(pd.read_csv(fh), df)


def assert_frame_equal_in_bucket(bucket: Bucket, key: str, df: pd.DataFrame) -> None:
    """The object is in this very bucket (read with the Bucket API, not the bridge) and holds ``df``."""
    data = bucket.get(key)
    assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
    pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(data)), df)


# ---------------------------------------------------------------- pyarrow.dataset
def partitioning() -> ds.Partitioning:
    return ds.partitioning(pa.schema([("part", pa.string())]), flavor="hive")


def write_partitioned(fs: Any, base: str, df: pd.DataFrame) -> None:
    ds.write_dataset(
        pa.Table.from_pandas(df, preserve_index=False),
        base,
        format="parquet",
        partitioning=partitioning(),
        filesystem=PyFileSystem(FSSpecHandler(fs)),
        max_rows_per_file=ROWS // 8,
        max_rows_per_group=ROWS // 16,
        basename_template="chunk-{i}.parquet",
    )


def read_partitioned(fs: Any, base: str) -> pd.DataFrame:
    table = ds.dataset(base, format="parquet", partitioning=partitioning(), filesystem=fs).to_table()
    return by_id(table.to_pandas())


def expected_partitioned(df: pd.DataFrame) -> pd.DataFrame:
    """What a hive-partitioned read gives back: the partition column last."""
    return by_id(df[[c for c in df.columns if c != "part"] + ["part"]])


def test_pyarrow_dataset_partitioned_round_trip(store: Store) -> None:
    df = frame()
    fs = store.bucket.fs()
    write_partitioned(fs, "ds/events", df)
    keys = keys_under(store.bucket, "ds/events/")
    assert {k.split("/")[2] for k in keys} == {f"part={p}" for p in PARTS}
    assert all(k.endswith(".parquet") for k in keys) and len(keys) >= 2 * len(PARTS)
    got = read_partitioned(fs, "ds/events")
    pd.testing.assert_frame_equal(got, expected_partitioned(df), check_dtype=True)
    # one partition, filtered by the reader: only its files are read
    one = ds.dataset("ds/events", format="parquet", partitioning=partitioning(), filesystem=fs)
    beta = by_id(one.to_table(filter=ds.field("part") == "beta").to_pandas())
    want = expected_partitioned(df[df["part"] == "beta"])
    pd.testing.assert_frame_equal(beta, want)


def test_pyarrow_parquet_file_reads_ranges_through_fs_open(store: Store) -> None:
    df = frame()
    store.bucket.put("pq/one.parquet", table_bytes(df, row_group_size=ROWS // 8))
    fs = store.bucket.fs()
    with fs.open("pq/one.parquet", "rb") as fh:
        pf = pq.ParquetFile(fh)
        assert pf.metadata.num_row_groups == 8
        tail = pf.read_row_group(7).to_pandas()
    pd.testing.assert_frame_equal(tail, df.iloc[7 * ROWS // 8 :].reset_index(drop=True))


def table_bytes(df: pd.DataFrame, row_group_size: int | None = None) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), sink, row_group_size=row_group_size)
    return sink.getvalue()


# ---------------------------------------------------------------- dask
@pytest.fixture(autouse=True)
def _threaded_dask() -> Iterator[None]:
    """Dask's threaded scheduler: the tasks share this process, so mem:// buckets are shared too;
    and strings as pandas makes them (Dask otherwise turns them into ``string[pyarrow]``, with
    pd.NA for a missing value, so a frame would differ from pandas' own by dtype alone)."""
    with dask.config.set({"scheduler": "threads", "num_workers": 2, "dataframe.convert-string": False}):
        yield


def test_dask_parquet_round_trip(store: Store) -> None:
    df = frame()
    ddf = dd.from_pandas(df, npartitions=4)
    ddf.to_parquet(store.portable_url("dask/pq"), write_index=False)
    written = [k for k in keys_under(store.bucket, "dask/pq/") if k.endswith(".parquet")]
    assert len(written) == 4
    got = dd.read_parquet(store.portable_url("dask/pq")).compute()
    pd.testing.assert_frame_equal(by_id(got), df)
    via_fs = dd.read_parquet("dask/pq", filesystem=store.bucket.fs()).compute()
    pd.testing.assert_frame_equal(by_id(via_fs), df)


def test_dask_csv_round_trip(store: Store) -> None:
    df = csv_frame()
    dd.from_pandas(df, npartitions=3).to_csv(store.portable_url("dask/csv/part-*.csv"), index=False)
    keys = keys_under(store.bucket, "dask/csv/")
    assert keys == [f"dask/csv/part-{i}.csv" for i in range(3)]
    expected = by_id(pd.concat([read_csv_bytes(store.bucket.get(k)) for k in keys]))
    pd.testing.assert_frame_equal(expected, df)
    got = dd.read_csv(store.portable_url("dask/csv/*.csv")).compute()
    pd.testing.assert_frame_equal(by_id(got), df)


# ---------------------------------------------------------------- polars
def test_polars_parquet_and_csv(store: Store) -> None:
    df = frame()
    expected = pl.from_pandas(df)
    fs = store.bucket.fs()
    # polars' own reader speaks its own object stores, not fsspec: it reads file objects
    with fs.open("polars/x.parquet", "wb") as fh:
        expected.write_parquet(fh)
    assert_frame_equal_in_bucket(store.bucket, "polars/x.parquet", df)
    with fs.open("polars/x.parquet", "rb") as fh:
        polars.testing.assert_frame_equal(pl.read_parquet(fh), expected)
    # storage_options go to fsspec on polars' pyarrow path
    got = pl.read_parquet(store.portable_url("polars/x.parquet"), use_pyarrow=True)
    polars.testing.assert_frame_equal(got, expected)
    got = pl.read_parquet("portable:///polars/x.parquet", use_pyarrow=True, storage_options=store.url_options())
    polars.testing.assert_frame_equal(got, expected)
    # read_csv: its pyarrow path opens the URL with fsspec.open(url, **storage_options), its
    # native path (polars' own object stores) knows no portable://; a file object works with both
    store.bucket.put("polars/x.csv", csv_frame().to_csv(index=False).encode())
    want = pl.read_csv(io.BytesIO(store.bucket.get("polars/x.csv")))
    got_csv = pl.read_csv("portable:///polars/x.csv", storage_options=store.url_options(), use_pyarrow=True)
    polars.testing.assert_frame_equal(got_csv, want)
    with fs.open("polars/x.csv", "rb") as fh:
        polars.testing.assert_frame_equal(pl.read_csv(fh), want)


# ---------------------------------------------------------------- the same reads under faults
def seed_objects(store: Store) -> dict[str, Any]:
    """Write every object the chaos reads need, through the clean bucket; return what each read must give."""
    df = frame()
    fs = store.bucket.fs()
    store.bucket.put("chaos/x.parquet", table_bytes(df, row_group_size=ROWS // 8))
    store.bucket.put("chaos/x.csv", csv_frame().to_csv(index=False).encode())
    write_partitioned(fs, "chaos/ds", df)
    dd.from_pandas(df, npartitions=4).to_parquet(store.portable_url("chaos/dask"), write_index=False)
    return {"frame": df, "csv": csv_frame(), "partitioned": expected_partitioned(df)}


def test_reads_under_20_percent_faults_return_identical_frames(store: Store) -> None:
    want = seed_objects(store)
    chaotic = store.open_chaos()
    fs = chaotic.fs()
    try:
        pd.testing.assert_frame_equal(pd.read_parquet("chaos/x.parquet", filesystem=fs), want["frame"])
        with fs.open("chaos/x.csv", "rb") as fh:
            pd.testing.assert_frame_equal(pd.read_csv(fh), want["csv"])
        pd.testing.assert_frame_equal(read_partitioned(fs, "chaos/ds"), want["partitioned"])
        pd.testing.assert_frame_equal(by_id(dd.read_parquet("chaos/dask", filesystem=fs).compute()), want["frame"])
        with fs.open("chaos/x.parquet", "rb") as fh:
            polars.testing.assert_frame_equal(pl.read_parquet(fh), pl.from_pandas(want["frame"]))
        assert_faults_were_injected(chaotic, at_least=3)
    finally:
        chaotic.close()


def test_reads_through_a_chaos_profile_url_return_identical_frames(store: Store) -> None:
    """The chaos+ bucket named by a profile: ``portable://CHAOSPROFILE/key``, as a user would."""
    want = seed_objects(store)
    url = store.portable_url
    pd.testing.assert_frame_equal(pd.read_parquet(url("chaos/x.parquet", chaos=True)), want["frame"])
    pd.testing.assert_frame_equal(pd.read_csv(url("chaos/x.csv", chaos=True)), want["csv"])
    got = by_id(dd.read_parquet(url("chaos/dask", chaos=True)).compute())
    pd.testing.assert_frame_equal(got, want["frame"])
    got_pl = pl.read_parquet(url("chaos/x.parquet", chaos=True), use_pyarrow=True)
    polars.testing.assert_frame_equal(got_pl, pl.from_pandas(want["frame"]))
    import fsspec

    fs, _ = fsspec.core.url_to_fs(url("chaos/x.parquet", chaos=True))
    assert_faults_were_injected(fs.bucket, at_least=3)


def test_writes_under_20_percent_faults_land_once_and_read_back_equal(store: Store) -> None:
    """Writes through the chaos bucket (lost replies included): what lands reads back equal."""
    df = frame()
    chaotic = store.open_chaos(seed=5)
    try:
        fs = chaotic.fs()
        df.to_parquet("chaosw/x.parquet", filesystem=fs)
        write_partitioned(fs, "chaosw/ds", df)
        assert_faults_were_injected(chaotic)
    finally:
        chaotic.close()
    assert_frame_equal_in_bucket(store.bucket, "chaosw/x.parquet", df)
    pd.testing.assert_frame_equal(read_partitioned(store.bucket.fs(), "chaosw/ds"), expected_partitioned(df))
