"""GCP: portable ``gs://`` against raw gcsfs, and portable ``pubsub://`` against the raw batched publisher.

    .venv/bin/python bench/gcp_bench.py [--rounds 9] [--ops 150] [--sizes 1024,1048576] [--messages 2000]

Everything runs round-robin in one process, against fake-gcs-server and
Google's Pub/Sub emulator started here on 127.0.0.1 through tests/emulators
(stopped by PID afterwards):

* storage, per object size: ``Bucket.get`` / ``Bucket.put`` on ``gs://``
  (validation, the retry guard and breaker, gcsfs's loop and session with its
  own retries off) against gcsfs's ``cat_file`` / ``pipe_file`` as gcsfs ships
  (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``); target portable >= 0.95x;
* Pub/Sub: ``Topic.publish_batch`` of ``--messages`` messages of 256 bytes
  (synchronous Publish requests of up to 1,000 messages) against the library's
  batching ``PublisherClient`` (``publish()`` every message, then wait on every
  future; default batch settings, and again with ``max_messages=1000``);
  target portable >= 0.9x of the faster. Single ``Topic.publish`` against
  ``publish().result()`` is reported too (latency, no target).

It prints ratios and writes ``bench/results/gcp_bench.json`` and ``.md``. The
emulators share the machine's two cores with the clients, so the figures
compare clients, not Google Cloud.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import interleave, write

STORAGE_TARGET = 0.95
PUBLISH_TARGET = 0.9


def _start(name: str) -> tuple[Any, Callable[[], None]]:
    from tests.emulators import create

    emulator = create(name)
    ok, reason = emulator.available()
    if not ok:
        raise SystemExit(f"{name} is not installed: {reason}")
    return emulator.start(), emulator.stop


def _rows(rates: dict[str, list[float]], baseline: float, unit_bytes: int | None = None) -> list[dict[str, Any]]:
    rows = []
    for name, values in rates.items():
        med = statistics.median(values)
        row: dict[str, Any] = {
            "contestant": name,
            "median_ops_per_s": round(med, 1),
            "min": round(min(values), 1),
            "max": round(max(values), 1),
        }
        if unit_bytes is not None:
            row["MiB_per_s"] = round(med * unit_bytes / 2**20, 2)
        row["ratio_vs_raw"] = round(med / baseline, 3)
        rows.append(row)
    return rows


def storage(info: Any, rounds: int, ops: int, sizes: list[int]) -> tuple[dict[str, Any], dict[str, float]]:
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # raw gcsfs on an emulator needs it
    import gcsfs

    from portable.config import Profile
    from portable.storage import open_bucket

    endpoint = info.endpoints["endpoint_url"]
    name = f"bench-{uuid.uuid4().hex[:10]}"
    fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=endpoint, project=info.endpoints["project"], skip_instance_cache=True)
    fs.mkdir(name)
    url = f"gs://{name}?engine=fsspec&endpoint_url={endpoint}"
    bucket = open_bucket(url, profile=Profile(name="bench", storage=url, queue="mem://", jobs="local://"))
    sections: dict[str, Any] = {}
    verdicts: dict[str, float] = {}
    try:
        for size in sizes:
            data = os.urandom(size)
            n = max(5, ops if size <= 64 * 1024 else ops // 5)
            keys = [f"s{size}/k{i % 10}" for i in range(n)]
            for key in set(keys):
                fs.pipe_file(f"{name}/{key}", data)

            def many(fn: Callable[[str], object], keys: list[str] = keys, n: int = n) -> Callable[[], int]:
                def go() -> int:
                    for key in keys:
                        fn(key)
                    return n

                return go

            contestants = {
                "get": {
                    "portable": many(bucket.get),
                    "gcsfs": many(lambda k: fs.cat_file(f"{name}/{k}")),
                },
                "put": {
                    "portable": many(lambda k, data=data: bucket.put(k, data)),  # type: ignore[misc]
                    "gcsfs": many(lambda k, data=data: fs.pipe_file(f"{name}/{k}", data)),  # type: ignore[misc]
                },
            }
            for op, fns in contestants.items():
                for fn in fns.values():  # warm connections and code paths
                    fn()
                rates = interleave(fns, rounds)
                raw = statistics.median(rates["gcsfs"])
                title = f"gs {op} {size} B ({n} ops x {rounds} rounds)"
                sections[title] = _rows(rates, raw, size)
                verdicts[title] = round(statistics.median(rates["portable"]) / raw, 3)
                print(f"{title}: portable/gcsfs = {verdicts[title]:.3f}", flush=True)
    finally:
        bucket.close()
    return sections, verdicts


def pubsub(info: Any, rounds: int, messages: int) -> tuple[dict[str, Any], dict[str, float]]:
    import grpc
    from google.cloud import pubsub_v1

    from portable.config import Profile
    from portable.messaging import open_topic

    host = info.endpoints["host_port"]
    project = info.endpoints["project"]
    os.environ["PUBSUB_EMULATOR_HOST"] = host  # the raw client finds the emulator only this way
    topic_name = f"bench-{uuid.uuid4().hex[:10]}"
    path = f"projects/{project}/topics/{topic_name}"
    url = f"pubsub://{project}/topics/{topic_name}?endpoint={host}"
    default = pubsub_v1.PublisherClient()
    wide = pubsub_v1.PublisherClient(batch_settings=pubsub_v1.types.BatchSettings(max_messages=1000))
    default.create_topic(name=path)
    topic = open_topic(url, profile=Profile(name="bench", storage="mem://", queue=url, jobs="local://"))
    body = os.urandom(256)
    batch = [body] * messages
    sections: dict[str, Any] = {}
    verdicts: dict[str, float] = {}

    def raw(client: Any) -> Callable[[], int]:
        def go() -> int:
            futures = [client.publish(path, body) for _ in range(messages)]
            for future in futures:
                future.result()
            return messages

        return go

    def portable() -> int:
        topic.publish_batch(batch)
        return messages

    try:
        fns = {
            "portable publish_batch": portable,
            "raw PublisherClient (default batching)": raw(default),
            "raw PublisherClient (max_messages=1000)": raw(wide),
        }
        for fn in fns.values():
            fn()
        rates = interleave(fns, rounds)
        best_raw = max(statistics.median(v) for k, v in rates.items() if k.startswith("raw"))
        title = f"pubsub publish {messages} x 256 B ({rounds} rounds)"
        sections[title] = _rows(rates, best_raw)
        verdicts[title] = round(statistics.median(rates["portable publish_batch"]) / best_raw, 3)
        print(f"{title}: portable/fastest raw = {verdicts[title]:.3f}", flush=True)

        singles = max(20, messages // 20)

        def one_portable() -> int:
            for _ in range(singles):
                topic.publish(body)
            return singles

        def one_raw() -> int:
            for _ in range(singles):
                default.publish(path, body).result()
            return singles

        single = {"portable publish": one_portable, "raw publish().result()": one_raw}
        for fn in single.values():
            fn()
        rates = interleave(single, rounds)
        title = f"pubsub single publish, {singles} in a row ({rounds} rounds; latency, no target)"
        sections[title] = _rows(rates, statistics.median(rates["raw publish().result()"]))
        print(f"{title}: portable/raw = {sections[title][0]['ratio_vs_raw']:.3f}", flush=True)
    finally:
        topic.close()
        try:
            default.delete_topic(topic=path)
        except grpc.RpcError:
            pass
        default.stop()
        wide.stop()
    return sections, verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=150, help="operations per round (a fifth for objects over 64 KiB)")
    parser.add_argument("--sizes", default="1024,1048576", help="object sizes in bytes, comma-separated")
    parser.add_argument("--messages", type=int, default=2000, help="messages per publish round")
    args = parser.parse_args()
    gcs_info, stop_gcs = _start("fake-gcs")
    try:
        pubsub_info, stop_pubsub = _start("pubsub")
        try:
            gs_sections, gs_verdicts = storage(gcs_info, args.rounds, args.ops, [int(s) for s in args.sizes.split(",")])
            ps_sections, ps_verdicts = pubsub(pubsub_info, args.rounds, args.messages)
        finally:
            stop_pubsub()
    finally:
        stop_gcs()
    write(
        "gcp_bench",
        {**gs_sections, **ps_sections},
        {
            "targets": {"gs_vs_gcsfs": STORAGE_TARGET, "publish_batch_vs_raw": PUBLISH_TARGET},
            "portable_vs_raw": {**gs_verdicts, **ps_verdicts},
        },
    )
    worst_gs = min(gs_verdicts.values())
    worst_ps = min(ps_verdicts.values())
    print(f"worst gs:// portable/gcsfs ratio: {worst_gs:.3f} (target >= {STORAGE_TARGET})")
    print(f"pubsub:// publish_batch/raw batched publisher: {worst_ps:.3f} (target >= {PUBLISH_TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
