"""AWS: portable ``s3://`` against raw s3fs and a boto3 loop, and portable ``sqs://`` against raw boto3.

    .venv/bin/python bench/aws_bench.py [--rounds 3] [--objects 2000] [--size 1024] [--messages 2000]

Everything runs round-robin in one process against one moto server started
here on 127.0.0.1 through tests/emulators (stopped by PID afterwards):

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
  against a raw ``send_message_batch`` loop of 10 per request; target
  portable >= 0.9x.

moto serves a few hundred requests a second and closes every connection, so
the figures compare client overhead on top of the same slow server, not AWS.
It prints ratios and writes ``bench/results/aws_bench.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import interleave, write

STORAGE_TARGET = 0.95
PUBLISH_TARGET = 0.9


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
            }
        )
    return rows


def storage(endpoint: str, region: str, rounds: int, count: int, size: int) -> dict[str, list[dict[str, Any]]]:
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

    def portable_put() -> int:
        for k in keys:
            bucket.put(k, data)
        return count

    def s3fs_put() -> int:
        for k in keys:
            tuned.pipe_file(f"{name}/s3fs/{k}", data)
        return count

    def boto3_put() -> int:
        for k in keys:
            client.put_object(Bucket=name, Key=f"boto3/{k}", Body=data)
        return count

    def portable_get() -> int:
        for k in keys:
            assert len(bucket.get(k)) == size
        return count

    def s3fs_get() -> int:
        for k in keys:
            assert len(tuned.cat_file(f"{name}/s3fs/{k}")) == size
        return count

    def s3fs_shipped_get() -> int:
        for k in keys:
            assert len(shipped.cat_file(f"{name}/s3fs/{k}")) == size
        return count

    def boto3_get() -> int:
        for k in keys:
            assert len(client.get_object(Bucket=name, Key=f"boto3/{k}")["Body"].read()) == size
        return count

    def portable_put_many() -> int:
        bucket.put_many({f"many/{k}": data for k in keys})
        return count

    def s3fs_pipe() -> int:
        tuned.pipe({f"{name}/s3fs-many/{k}": data for k in keys})
        return count

    def portable_get_many() -> int:
        assert len(bucket.get_many([f"many/{k}" for k in keys])) == count
        return count

    def s3fs_cat() -> int:
        assert len(tuned.cat([f"{name}/s3fs-many/{k}" for k in keys])) == count
        return count

    puts = interleave({"portable put": portable_put, "s3fs-tuned pipe_file": s3fs_put, "boto3 put_object": boto3_put}, rounds)
    gets = interleave(
        {
            "portable get": portable_get,
            "s3fs-tuned cat_file": s3fs_get,
            "s3fs-as-shipped cat_file": s3fs_shipped_get,
            "boto3 get_object": boto3_get,
        },
        rounds,
    )
    batch_puts = interleave({"portable put_many": portable_put_many, "s3fs-tuned pipe(dict)": s3fs_pipe}, rounds)
    batch_gets = interleave({"portable get_many": portable_get_many, "s3fs-tuned cat(list)": s3fs_cat}, rounds)
    bucket.close()
    return {
        f"S3 put, {count} x {size} B, one call per object": _rows(puts, "s3fs-tuned pipe_file"),
        f"S3 get, {count} x {size} B, one call per object": _rows(gets, "s3fs-tuned cat_file"),
        f"S3 batch put, {count} x {size} B": _rows(batch_puts, "s3fs-tuned pipe(dict)"),
        f"S3 batch get, {count} x {size} B": _rows(batch_gets, "s3fs-tuned cat(list)"),
    }


def messaging(endpoint: str, region: str, rounds: int, count: int) -> dict[str, list[dict[str, Any]]]:
    import boto3
    from botocore.config import Config

    from portable.config import Profile
    from portable.messaging import open_topic

    name = f"bench-{uuid.uuid4().hex[:10]}"
    client = boto3.client(
        "sqs", endpoint_url=endpoint, region_name=region,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, max_pool_connections=32),
    )
    queue_url = client.create_queue(QueueName=name)["QueueUrl"]
    url = f"sqs://{name}?region={region}&endpoint_url={endpoint}"
    topic = open_topic(url, profile=Profile(name="bench", storage="mem://bench", queue=url, jobs="local://"))
    body = os.urandom(128).hex().encode()  # 256 bytes of text

    def portable_batch() -> int:
        ids = topic.publish_batch([body] * count)
        assert len(ids) == count
        return count

    def raw_batch() -> int:
        text = body.decode()
        for start in range(0, count, 10):
            n = min(10, count - start)
            resp = client.send_message_batch(
                QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": text} for i in range(n)]
            )
            assert len(resp["Successful"]) == n
        return count

    def drain() -> None:
        client.purge_queue(QueueUrl=queue_url)

    rates = interleave({"portable publish_batch": portable_batch, "boto3 send_message_batch": raw_batch}, rounds)
    drain()
    topic.close()
    client.delete_queue(QueueUrl=queue_url)
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--messages", type=int, default=2000)
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
        sections = storage(endpoint, region, args.rounds, args.objects, args.size)
        sections.update(messaging(endpoint, region, args.rounds, args.messages))
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
