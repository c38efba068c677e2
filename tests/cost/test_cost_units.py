"""The cost meter without an emulator: price classes, multi-request calls, settings, projections,
the saved report and the ``portable cost`` command.

Calls are fed to the meter as the guard reports them (:class:`CallInfo` and
the observer protocol), and the projection is checked against arithmetic done
by hand from the price table's figures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from portable.cli import main
from portable.cost import (
    PRICES,
    CostMeter,
    CostSettings,
    Traffic,
    load_cost_settings,
    parse_count,
    parse_size,
    project,
)
from portable.driver.messaging import OutgoingMessage
from portable.errors import ConfigError, InvalidArgument
from portable.telemetry._observe import CallInfo

MiB = 1024 * 1024


def call(meter: CostMeter, provider: str, operation: str, what: str, args: tuple[Any, ...] = (),
         result: Any = None, failures: int = 0, target: str = "bkt") -> None:
    """Play one guarded call to the meter: ``failures`` failed attempts, then success."""
    info = CallInfo(provider, "https://endpoint", "write", operation, what, args, target)  # type: ignore[call-arg]
    scope = meter.started(info)
    assert scope is not None
    for n in range(1, failures + 1):
        scope.attempt_failed(n, RuntimeError("503"), 0.0)
    scope.ended(None, result)


def meter() -> CostMeter:
    return CostMeter(CostSettings(), export=False)


# -- price classes ---------------------------------------------------------
def test_s3_price_classes_and_retries() -> None:
    m = meter()
    call(m, "s3", "put", "put a", ("a", b"12345", None))
    call(m, "s3", "get", "get a", ("a",), b"12345", failures=2)      # three attempts, three requests
    call(m, "s3", "head", "head a", ("a",))
    call(m, "s3", "list_page", "list ", ("", None, None, 1000, None))
    call(m, "s3", "copy", "copy a -> b", ("a", "b"))
    call(m, "s3", "delete", "delete a", ("a",))
    call(m, "s3", "signed_url", "signed_url a", ("a", "GET", None, None), "https://signed")
    u = m.usage()
    assert u.requests_of("tier1") == 3 and u.requests_of("tier2") == 4 and u.requests_of("delete") == 1
    assert u.bytes_in() == 5 and u.bytes_out() == 5
    assert m.report().usd == pytest.approx(3 * 0.005 / 1000 + 4 * 0.0004 / 1000)


def test_a_rejected_call_sends_nothing_and_other_providers_are_not_counted() -> None:
    m = meter()
    scope = m.started(CallInfo("s3", "e", "read", "get", "get a", ("a",)))
    assert scope is not None
    scope.rejected(RuntimeError("open"))
    for provider in ("kafka", "mem", "file", "sqlite", "local"):
        assert m.started(CallInfo(provider, "e", "read", "get", "get a", ("a",))) is None
    assert m.usage().requests == 0


def test_gcs_and_azure_classes() -> None:
    m = meter()
    for provider in ("gs", "az"):
        call(m, provider, "put", "put a", ("a", b"x", None))
        call(m, provider, "get", "get a", ("a",), b"x")
        call(m, provider, "head", "head a", ("a",))
        call(m, provider, "list_page", "list ", ("", None, None, 1000, None))
        call(m, provider, "delete", "delete a", ("a",))
    u = m.usage()
    assert (u.requests_of("class_a"), u.requests_of("class_b")) == (2, 2)
    # Azure: Get Blob Properties is an "other" operation, List Blobs a "list and create container" one
    assert {c: u.requests_of(c, service="azure-blob-hot") for c in ("write", "read", "other", "list_create", "delete")} \
        == {"write": 1, "read": 1, "other": 1, "list_create": 1, "delete": 1}


def _stream(m: CostMeter, provider: str, size: int, part: int, chunk: int) -> None:
    call(m, provider, "open_write", "open big", ("big", None, part))
    left = size
    while left:
        n = min(chunk, left)
        call(m, provider, "write", "write big", (b"b" * n,))
        left -= n
    call(m, provider, "_commit_once", "commit big")


@pytest.mark.parametrize(
    ("provider", "size", "expected"),
    [
        ("s3", 3 * MiB, 1),                 # one part: PutObject
        ("s3", 5 * MiB, 1),                 # exactly one part: still PutObject
        ("s3", 12 * MiB, 1 + 3 + 1),        # create, 3 parts, complete
        ("s3", 10 * MiB, 1 + 2 + 1),        # two full parts
        ("az", 12 * MiB, 3 + 1),            # 3 Put Block, Put Block List
        ("gs", 12 * MiB, 1 + 3),            # initiate, 3 chunks (the last completes)
    ],
)
def test_streamed_write_counts_each_part(provider: str, size: int, expected: int) -> None:
    m = meter()
    _stream(m, provider, size, 5 * MiB, MiB)
    assert m.usage().requests == expected


def test_parts_are_counted_as_they_go_out() -> None:
    m = meter()
    call(m, "s3", "open_write", "open big", ("big", None, 5 * MiB))
    call(m, "s3", "write", "write big", (b"b" * (5 * MiB),))
    assert m.usage().requests == 0                       # held back: it may be the only part
    call(m, "s3", "write", "write big", (b"b",))
    assert m.usage().requests == 2                       # CreateMultipartUpload + part 1


def test_sqs_chunks_and_batches() -> None:
    m = meter()
    call(m, "sqs", "publish", "publish q", (OutgoingMessage(b"a" * (64 * 1024 + 1)),), "id")
    batch = [OutgoingMessage(b"m" * 30_000) for _ in range(12)]   # 360 KB: SendMessageBatch of 8 + of 4
    call(m, "sqs", "publish_batch", "publish q", (batch,), ["id"] * 12)
    call(m, "sqs", "receive", "receive q", (10, 0.0, 30.0), [])       # an empty receive is billed too
    call(m, "sqs", "ack_many", "ack 25 messages", (list(range(25)),), [None] * 25)
    u = m.usage()
    assert u.requests_of("request") == 1 + 2 + 1 + 3
    # 65,537 B: 2 chunks; 8 x 30,000 = 240,000 B: 4 chunks; 4 x 30,000 = 120,000 B: 2 chunks
    assert u.units_of("request") == 2 + 4 + 2 + 1 + 3


def test_pubsub_bytes_with_the_1000_byte_minimum() -> None:
    m = meter()
    call(m, "pubsub", "publish", "publish t", (OutgoingMessage(b"x" * 10),), "1234567890")
    call(m, "pubsub", "publish", "publish t", (OutgoingMessage(b"x" * 5000, {"k": "vv"}),), "1234567890")
    call(m, "pubsub", "ack", "ack 1", ("h",))
    u = m.usage()
    assert u.units_of("throughput") == 1000 + (5000 + 3 + 20 + 10)
    assert u.requests_of("free") == 1
    assert m.report().usd == pytest.approx((1000 + 5033) * 40 / 1024**4)


def test_express_directory_buckets_and_per_gb_fees() -> None:
    m = meter()
    call(m, "s3", "get", "get a", ("a",), b"x" * MiB, target="hot--use1-az4--x-s3")
    u = m.usage()
    assert u.requests_of("tier2", service="s3-express") == 1
    report = m.report()
    retrieval = [line for line in report.lines if line.item == "retrieval"]
    assert retrieval and retrieval[0].usd == pytest.approx(MiB / 1024**3 * 0.0006)


def test_egress_is_priced_only_when_bytes_leave_the_region() -> None:
    settings = CostSettings(egress_by_resource={"public": "internet"})
    m = CostMeter(settings, export=False)
    call(m, "s3", "get", "get a", ("a",), b"x" * MiB, target="public")
    call(m, "s3", "get", "get a", ("a",), b"x" * MiB, target="private")
    egress = [line for line in m.report().lines if line.item == "egress"]
    assert [(line.resource, line.units) for line in egress] == [("public", MiB)]
    assert egress[0].usd == pytest.approx(MiB / 1024**3 * 0.09)


# -- projection: the hand math ---------------------------------------------
def test_the_200m_gets_a_day_projection_matches_hand_math() -> None:
    rows = {r.service: r for r in project(Traffic(gets_per_day=200e6, object_size=1024),
                                           ["s3", "gcs", "azure", "s3express"])}  # fmt: skip
    month = 200e6 * 30
    assert rows["s3-standard"].usd == pytest.approx(month / 1000 * 0.0004)           # $2,400
    assert rows["gcs-standard"].usd == pytest.approx(month / 1000 * 0.0004)          # $2,400
    assert rows["azure-blob-hot"].usd == pytest.approx(month / 10000 * 0.0044)       # $2,640
    express = month / 1000 * 0.00003 + month * 1024 / 1024**3 * 0.0006               # $180 + $3.43
    assert rows["s3-express"].usd == pytest.approx(express)
    assert round(rows["s3-express"].usd, 2) == 183.43
    assert rows["s3-standard"].requests == month


def test_projection_with_writes_egress_storage_and_messages() -> None:
    traffic = Traffic(puts_per_day=1e6, gets_per_day=1e6, object_size=MiB, stored_gb=100, egress="internet",
                      messages_per_day=1e6, message_size=100 * 1024, batch=1)  # fmt: skip
    rows = {r.service: r for r in project(traffic, ["s3", "sqs", "pubsub"])}
    s3 = rows["s3-standard"].items
    assert s3["tier1"] == pytest.approx(30e6 / 1000 * 0.005)
    assert s3["egress"] == pytest.approx(30e6 * MiB / 1024**3 * 0.09)
    assert s3["storage"] == pytest.approx(100 * 0.023)
    # SQS: publish and receive of 100 KiB are 2 chunks each, the delete 1
    assert rows["sqs-standard"].items["request"] == pytest.approx(30e6 * (2 + 2 + 1) * 0.40 / 1e6)
    assert rows["pubsub"].items["throughput"] == pytest.approx(2 * 30e6 * (100 * 1024 + 20) * 40 / 1024**4)


def test_bad_projection_input_is_a_typed_error() -> None:
    with pytest.raises(InvalidArgument, match="unknown provider 'dynamo'"):
        project(Traffic(gets_per_day=1), ["s3", "dynamo"])
    with pytest.raises(InvalidArgument, match="at least one provider"):
        project(Traffic(gets_per_day=1), [])
    with pytest.raises(InvalidArgument, match="batch"):
        Traffic(batch=11)
    with pytest.raises(InvalidArgument, match="gets_per_day"):
        Traffic(gets_per_day=-1)


@pytest.mark.parametrize(("text", "value"), [("200M", 200e6), ("1.5k", 1500), ("3", 3), ("2e3", 2000), ("1G", 1e9)])
def test_counts(text: str, value: float) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize(("text", "value"), [("1KiB", 1024), ("1KB", 1000), ("512", 512), ("4 MiB", 4 * MiB), ("1gib", 1024**3)])
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["1KiZ", "abc", "-5", "1 parsec"])
def test_bad_sizes_and_counts(text: str) -> None:
    with pytest.raises(InvalidArgument, match="KiB"):
        parse_size(text)
    with pytest.raises(InvalidArgument, match="suffix"):
        parse_count(text)


# -- settings from portable.toml -------------------------------------------
def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "portable.toml"
    path.write_text(text)
    return path


def test_settings_choose_a_tier_and_override_prices(tmp_path: Path) -> None:
    path = _toml(tmp_path, """
[cost]
services = { s3 = "s3-express" }
egress = "internet"
days_per_month = 31
[cost.prices.s3-express]
tier2 = 0.0000001
region = "us-west-2"
""")
    settings = load_cost_settings(path)
    assert settings.service_for("s3").service == "s3-express"
    assert settings.prices["s3-express"].price_of("tier2") == 0.0000001
    assert settings.prices["s3-express"].region == "us-west-2"
    assert "portable.toml overrides: tier2" in settings.prices["s3-express"].sources[-1]
    rows = project(Traffic(gets_per_day=1e6), ["s3express"], settings)
    assert rows[0].usd == pytest.approx(31e6 * 0.0000001)


def test_a_cost_table_sits_beside_the_profiles_of_portable_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One portable.toml holds the profiles and [cost]: the profile loads, the meter reads its table."""
    from portable.config import load_profile

    path = _toml(tmp_path, """
[profiles.dev]
storage = "mem://dev"
[cost]
egress = "internet"
""")
    monkeypatch.setenv("PORTABLE_CONFIG", str(path))
    assert load_profile("dev").storage == "mem://dev"
    assert load_cost_settings().egress == "internet"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[cost]\negres = 'internet'\n", "unknown key.*egres"),
        ("[cost]\nservices = { s3 = 's3-expres' }\n", "did you mean s3-express"),
        ("[cost]\nservices = { s4 = 's3-express' }\n", "unknown provider family 's4'"),
        ("[cost]\nservices = { gcs = 's3-express' }\n", "cannot price gcs"),
        ("[cost]\negress = 'moon'\n", "in-region' or 'internet'"),
        ("[cost]\ndays_per_month = 0\n", "days_per_month"),
        ("[cost.prices.s3-standard]\ntier3 = 1.0\n", "unknown key cost.prices.s3-standard.tier3"),
        ("[cost.prices.s3-standard]\ntier1 = -1.0\n", "must be a price"),
        ("[cost.prices.r2]\ntier1 = 1.0\n", "unknown service cost.prices.r2"),
    ],
)
def test_bad_settings_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_cost_settings(_toml(tmp_path, text))


def test_every_price_has_a_date_and_a_source() -> None:
    for name, prices in PRICES.items():
        assert prices.service == name and prices.as_of and prices.sources
        assert all(s.startswith("https://") for s in prices.sources)
        assert all(v >= 0 and math.isfinite(v) for v in prices.classes.values())


# -- saved runs and the command ---------------------------------------------
def test_save_load_and_the_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = meter()
    call(m, "s3", "get", "get a", ("a",), b"x", failures=1)
    call(m, "sqs", "publish", "publish q", (OutgoingMessage(b"m"),), "id", target="q")
    path = m.save(tmp_path / "run.json")
    usage = CostMeter.load(path)
    assert usage.requests == 3 and usage.requests_of("tier2") == 2

    assert main(["cost", "--from", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 3
    assert data["usd"] == pytest.approx(2 * 0.0004 / 1000 + 0.40 / 1e6)
    assert data["prices"]["s3-standard"]["as_of"] == PRICES["s3-standard"].as_of

    assert main(["cost", "--from", str(path), "--per-month", "--json"]) == 0
    monthly = json.loads(capsys.readouterr().out)
    factor = 30 * 86400 / data["seconds"]
    assert monthly["usd"] == pytest.approx(data["usd"] * factor)

    assert main(["cost", "--from", str(path)]) == 0
    text = capsys.readouterr().out
    assert "s3-standard" in text and "tier2" in text and "as of" in text


def test_the_command_refuses_what_is_not_a_saved_meter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "other"}')
    assert main(["cost", "--from", str(bad)]) == 1
    assert "not a saved cost meter" in capsys.readouterr().err
    assert main(["cost", "--from", str(tmp_path / "missing.json")]) == 1
    assert "cannot be read" in capsys.readouterr().err


def test_project_command(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "project", "--gets-per-day", "200M", "--object-size", "1KiB",
            "--providers", "s3,gcs,azure,s3express", "--json"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    usd = {p["service"]: round(p["usd"], 2) for p in data["projections"]}
    assert usd == {"s3-standard": 2400.0, "gcs-standard": 2400.0, "azure-blob-hot": 2640.0, "s3-express": 183.43}
    assert main(["cost", "project", "--gets-per-day", "200M", "--object-size", "1KiZ", "--providers", "s3"]) == 1
    assert "not a size" in capsys.readouterr().err
    assert main(["cost", "project", "--gets-per-day", "2X", "--providers", "s3"]) == 1
    assert "not a count" in capsys.readouterr().err
    assert main(["cost", "project", "--gets-per-day", "2", "--providers", "s3,r2"]) == 1
    assert "unknown provider 'r2'" in capsys.readouterr().err
    assert main(["cost", "prices"]) == 0
    assert "not verified" in capsys.readouterr().out


def test_the_meter_registers_only_while_installed() -> None:
    from portable.telemetry._observe import OBSERVERS

    m = meter()
    with m:
        assert m in OBSERVERS
    assert m not in OBSERVERS


def test_batch_calls_once_reported_count_one_request_per_item() -> None:
    """How the meter counts a batch when the storage layer reports it (docs/cost.md: not yet seen)."""
    m = meter()
    items = [(f"k{i}", b"x" * 10) for i in range(5)]
    call(m, "s3", "put_many", "put_many 5", (items, None), [(k, "etag") for k, _ in items])
    call(m, "s3", "get_many", "get_many 3", (["a", "b", "c"],), [("a", b"12"), ("b", b"3"), ("c", RuntimeError())])
    call(m, "s3", "copy_many", "copy_many 2", ([("a", "b"), ("c", "d")],), [])
    call(m, "s3", "delete_many", "delete_many 2500", ([f"k{i}" for i in range(2500)],), [])
    call(m, "az", "delete_many", "delete_many 3", (["a", "b", "c"],), [])
    u = m.usage()
    assert u.requests_of("tier1") == 5 + 2 and u.requests_of("tier2") == 3
    assert u.requests_of("delete", service="s3-standard") == 3          # DeleteObjects: 1,000 keys each
    assert u.requests_of("delete", service="azure-blob-hot") == 3       # one Delete Blob per key
    assert u.bytes_in() == 50 and u.bytes_out() == 3
