"""AWS: portable ``s3://`` against raw s3fs and a boto3 loop, and portable ``sqs://`` against raw boto3.

    .venv/bin/python bench/aws_bench.py [--slices 10] [--objects 2000] [--size 1024] [--messages 2000]

Everything runs in one process against one moto server started here on
127.0.0.1 through tests/emulators (stopped by PID afterwards). Each contestant
gets the same keys in ``--slices`` slices, round-robin slice by slice, so a
slow spell of the shared machine hits all alike; medians of the slices are
compared:

* S3, ``--objects`` objects of ``--size`` bytes, one call per object:
  ``Bucket.put`` / ``Bucket.get`` on ``s3://`` (validation, the retry guard
  and breaker, the s3fs loop, one aiobotocore call) against raw s3fs tuned
  the same way (``pipe_file`` / ``cat_file`` with ``max_concurrency=1``,
  botocore retries off, path-style addressing) and against a plain boto3
  ``put_object`` / ``get_object`` loop; target portable >= 0.95x tuned s3fs.
  s3fs's ``cat_file`` as shipped (``max_concurrency=10``, which sends a HEAD
  before every GET) is reported too, and so are the batch calls
  (``put_many`` / ``get_many`` against s3fs's ``pipe`` / ``cat`` of a dict
  or list, both on one event loop with bounded concurrency).
* SQS: ``Topic.publish_batch`` of ``--messages`` messages of 256 bytes
  against a raw ``send_message_batch`` loop of 10 per request, each slice
  into an empty queue (moto slows down as a queue grows); target
  portable >= 0.9x.

moto serves a few hundred requests a second and closes every connection, so
the figures compare client overhead on top of the same slow server, not AWS;
``client_cpu_us_per_op`` (this process's CPU time per operation, all threads)
shows that overhead with less noise than the wall-clock rates.
It prints ratios and writes ``bench/results/aws_bench.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import write

STORAGE_TARGET = 0.95
PUBLISH_TARGET = 0.9


def sliced(
    contestants: dict[str, Callable[[list[str]], int]],
    keys: list[str],
    slices: int,
    after: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Give every contestant the same ``keys`` in ``slices`` slices, round-robin slice by slice
    (the order rotating from slice to slice).

    A slow spell of the shared machine then hits every contestant alike; each
    slice is one sample (operations per second), and the medians are compared.
    """
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    step = max(1, len(keys) // slices)
    order = list(contestants.items())
    for start in range(0, len(keys), step):
        part = keys[start : start + step]
        order = order[1:] + order[:1]  # rotate, so that no contestant always runs first
        for name, fn in order:
            t0, c0 = time.perf_counter(), time.process_time()
            ops = fn(part)
            rates[name].append(ops / (time.perf_counter() - t0))
            CPU.setdefault(name, []).append((time.process_time() - c0) / ops * 1e6)
            if after is not None:
                after()  # untimed: reset what the contestant left behind
    for name, values in rates.items():
        print(f"  {name}: median {statistics.median(values):.1f} ops/s over {len(values)} slices", flush=True)
    return rates


#: client CPU (this process, every thread) per operation, in microseconds, per contestant and slice
CPU: dict[str, list[float]] = {}


def _rows(rates: dict[str, list[float]], baseline: str) -> list[dict[str, Any]]:
    base = statistics.median(rates[baseline])
    rows = []
    for name, values in rates.items():
        med = statistics.median(values)
        rows.append(
            {
                "contestant": name,
                "median_ops_per_s": round(med, 1),
                "min": round(min(values), 1),
                "max": round(max(values), 1),
                "ratio_vs_" + baseline.split(" ")[0].replace("-", "_"): round(med / base, 3),
                "client_cpu_us_per_op": round(statistics.median(CPU[name])),
            }
        )
    return rows


def storage(endpoint: str, region: str, slices: int, count: int, size: int) -> dict[str, list[dict[str, Any]]]:
    import boto3
    import s3fs
    from botocore.config import Config

    from portable.config import Profile
    from portable.storage import open_bucket

    name = f"bench-{uuid.uuid4().hex[:10]}"
    retries = {"total_max_attempts": 1, "mode": "standard"}
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name=region,
        config=Config(retries=retries, s3={"addressing_style": "path"}, max_pool_connections=32),
    )
    client.create_bucket(Bucket=name)
    config_kwargs = {"retries": retries, "s3": {"addressing_style": "path"}, "max_pool_connections": 32}
    client_kwargs = {"endpoint_url": endpoint, "region_name": region}
    tuned = s3fs.S3FileSystem(
        client_kwargs=client_kwargs, config_kwargs=config_kwargs, max_concurrency=1, skip_instance_cache=True
    )
    tuned.retries = 1
    shipped = s3fs.S3FileSystem(client_kwargs=client_kwargs, config_kwargs=config_kwargs, skip_instance_cache=True)
    url = f"s3://{name}/portable?engine=fsspec&region={region}&endpoint_url={endpoint}"
    bucket = open_bucket(url, profile=Profile(name="bench", storage=url, queue="mem://bench", jobs="local://"))
    data = os.urandom(size)
    keys = [f"obj-{i:05d}" for i in range(count)]

    def portable_put(part: list[str]) -> int:
        for k in part:
            bucket.put(k, data)
        return len(part)

    def s3fs_put(part: list[str]) -> int:
        for k in part:
            tuned.pipe_file(f"{name}/s3fs/{k}", data)
        return len(part)

    def boto3_put(part: list[str]) -> int:
        for k in part:
            client.put_object(Bucket=name, Key=f"boto3/{k}", Body=data)
        return len(part)

    def portable_get(part: list[str]) -> int:
        for k in part:
            assert len(bucket.get(k)) == size
        return len(part)

    def s3fs_get(part: list[str]) -> int:
        for k in part:
            assert len(tuned.cat_file(f"{name}/s3fs/{k}")) == size
        return len(part)

    def s3fs_shipped_get(part: list[str]) -> int:
        part = part[: max(1, len(part) // 4)]  # a quarter is enough to show the extra HEAD
        for k in part:
            assert len(shipped.cat_file(f"{name}/s3fs/{k}")) == size
        return len(part)

    def boto3_get(part: list[str]) -> int:
        for k in part:
            assert len(client.get_object(Bucket=name, Key=f"boto3/{k}")["Body"].read()) == size
        return len(part)

    def portable_put_many(part: list[str]) -> int:
        bucket.put_many({f"many/{k}": data for k in part})
        return len(part)

    def s3fs_pipe(part: list[str]) -> int:
        tuned.pipe({f"{name}/s3fs-many/{k}": data for k in part})
        return len(part)

    def portable_get_many(part: list[str]) -> int:
        assert len(bucket.get_many([f"many/{k}" for k in part])) == len(part)
        return len(part)

    def s3fs_cat(part: list[str]) -> int:
        assert len(tuned.cat([f"{name}/s3fs-many/{k}" for k in part])) == len(part)
        return len(part)

    print("S3 put", flush=True)
    puts = sliced({"portable put": portable_put, "s3fs-tuned pipe_file": s3fs_put, "boto3 put_object": boto3_put}, keys, slices)
    print("S3 get", flush=True)
    gets = sliced(
        {
            "portable get": portable_get,
            "s3fs-tuned cat_file": s3fs_get,
            "s3fs-as-shipped cat_file": s3fs_shipped_get,
            "boto3 get_object": boto3_get,
        },
        keys,
        slices,
    )
    print("S3 batches", flush=True)
    batch_puts = sliced({"portable put_many": portable_put_many, "s3fs-tuned pipe(dict)": s3fs_pipe}, keys, slices)
    batch_gets = sliced({"portable get_many": portable_get_many, "s3fs-tuned cat(list)": s3fs_cat}, keys, slices)
    bucket.close()
    return {
        f"S3 put, {count} x {size} B, one call per object": _rows(puts, "s3fs-tuned pipe_file"),
        f"S3 get, {count} x {size} B, one call per object": _rows(gets, "s3fs-tuned cat_file"),
        f"S3 batch put, {count} x {size} B": _rows(batch_puts, "s3fs-tuned pipe(dict)"),
        f"S3 batch get, {count} x {size} B": _rows(batch_gets, "s3fs-tuned cat(list)"),
    }


def messaging(endpoint: str, region: str, slices: int, count: int) -> dict[str, list[dict[str, Any]]]:
    import boto3
    from botocore.config import Config

    from portable.config import Profile
    from portable.messaging import open_topic

    client = boto3.client(
        "sqs", endpoint_url=endpoint, region_name=region,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, max_pool_connections=32),
    )
    body = os.urandom(128).hex().encode()  # 256 bytes of text
    current: dict[str, Any] = {}

    def fresh_queue() -> None:
        """Untimed, after every contestant's slice: moto's SendMessageBatch slows down as its
        queue grows (and it allows one PurgeQueue a minute), so each slice gets an empty queue."""
        if current:
            current["topic"].close()
            client.delete_queue(QueueUrl=current["queue_url"])
        name = f"bench-{uuid.uuid4().hex[:10]}"
        current["queue_url"] = client.create_queue(QueueName=name)["QueueUrl"]
        url = f"sqs://{name}?region={region}&endpoint_url={endpoint}"
        current["topic"] = open_topic(url, profile=Profile(name="bench", storage="mem://bench", queue=url, jobs="local://"))

    def portable_batch(part: list[str]) -> int:
        ids = current["topic"].publish_batch([body] * len(part))
        assert len(ids) == len(part)
        return len(part)

    def raw_batch(part: list[str]) -> int:
        text = body.decode()
        queue_url = current["queue_url"]
        for start in range(0, len(part), 10):
            n = min(10, len(part) - start)
            resp = client.send_message_batch(
                QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": text} for i in range(n)]
            )
            assert len(resp["Successful"]) == n
        return len(part)

    print("SQS publish_batch", flush=True)
    messages = [str(i) for i in range(count)]
    fresh_queue()
    rates = sliced(
        {"portable publish_batch": portable_batch, "boto3 send_message_batch": raw_batch},
        messages,
        slices,
        after=fresh_queue,
    )
    current["topic"].close()
    client.delete_queue(QueueUrl=current["queue_url"])
    return {f"SQS publish, {count} x 256 B in batches of 10": _rows(rates, "boto3 send_message_batch")}


def _check(sections: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for title, rows in sections.items():
        for row in rows:
            if row["contestant"].startswith("portable"):
                ratio = next(v for k, v in row.items() if k.startswith("ratio_vs_"))
                ratios[title] = ratio
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slices", type=int, default=10, help="interleaved samples per contestant")
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--only", choices=["s3", "sqs"], help="run one half (the results file then holds only it)")
    args = parser.parse_args(argv)

    from tests.emulators import create

    moto = create("moto")
    ok, reason = moto.available()
    if not ok:
        raise SystemExit(f"moto is not installed: {reason}")
    info = moto.start()
    try:
        os.environ.update({k: v for k, v in info.env.items() if k != "AWS_ENDPOINT_URL"})
        endpoint, region = info.endpoints["endpoint_url"], info.endpoints["region"]
        sections: dict[str, list[dict[str, Any]]] = {}
        if args.only in (None, "s3"):
            sections.update(storage(endpoint, region, args.slices, args.objects, args.size))
        if args.only in (None, "sqs"):
            sections.update(messaging(endpoint, region, args.slices, args.messages))
    finally:
        moto.stop()
    ratios = _check(sections)
    targets: dict[str, float] = {}
    for title in ratios:
        if title.startswith("S3 put") or title.startswith("S3 get"):
            targets[title] = STORAGE_TARGET
        elif title.startswith("SQS"):
            targets[title] = PUBLISH_TARGET
    verdicts = {
        title: {"ratio": ratio, "target": targets.get(title), "met": ratio >= targets[title] if title in targets else None}
        for title, ratio in ratios.items()
    }
    write("aws_bench", sections, {"args": vars(args), "targets": verdicts})
    for title, verdict in verdicts.items():
        target = verdict["target"]
        note = "" if target is None else f" (target >= {target}: {'met' if verdict['met'] else 'NOT met'})"
        print(f"portable / baseline, {title}: {verdict['ratio']:.3f}x{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
