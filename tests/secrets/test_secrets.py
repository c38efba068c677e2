"""No secret in a repr, an error's cause chain, a traceback, a DEBUG log line or the command's output.

One known secret (``SECRET``) goes in every place a user might put one: URL
user info, query options by name and by %-encoded name, option values that
are URLs, ``portable.toml`` profile values, ``PORTABLE_*_URL`` and the
providers' own environment variables. Buckets and topics are opened on mem://,
file://, moto (S3 on both engines, SQS), Azurite (both blob engines, queues)
and kafka:// (settings, and an unreachable broker); errors are provoked (bad
credentials, unreachable endpoints, missing objects and queues, invalid
URLs). Everything a user can read is collected by the ``watch`` fixture
(tests/secrets/conftest.py) and must not contain the secret.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from portable import InvalidURL, PortableError, open_bucket
from portable.messaging import open_subscription, open_topic
from portable.resilience import ResiliencePolicy, RetryPolicy

from .conftest import SECRET, SECRET2, Watch

#: One attempt, no breaker: an error surfaces at once, and no test opens a breaker for another.
ONCE = ResiliencePolicy(retry=RetryPolicy(max_attempts=1), breaker=None)
#: A closed port on the loopback: connections are refused at once.
UNREACHABLE = "http://127.0.0.1:9"


def _open(domain: str, url: str) -> Any:
    if domain == "storage":
        return open_bucket(url, policy=ONCE)
    if domain == "messaging":
        return open_topic(url, policy=ONCE)
    if domain == "compute":
        from portable.compute import open_launcher

        return open_launcher(url, policy=ONCE)
    from portable.idempotency import open_store

    return open_store(url, policy=ONCE)


# ---------------------------------------------------------------- URLs: refused, and masked
USERINFO_URLS = [
    ("storage", "mem://user:{s}@bucket"),
    ("storage", "file://user:{s}@/tmp/portable-secrets"),
    ("storage", "s3://AKIAEXAMPLE:{s}@bucket?engine=fsspec"),
    ("storage", "s3://AKIAEXAMPLE:{s}@bucket?engine=obstore"),
    ("storage", "gs://user:{s}@bucket"),
    ("storage", "az://container:{s}@acct/p"),
    ("storage", "abfs://container:{s}@acct.dfs.core.windows.net/p"),
    ("messaging", "mem://user:{s}@queue"),
    ("messaging", "sqlite://user:{s}@/tmp/q.db?name=x"),
    ("messaging", "sqs://AKIAEXAMPLE:{s}@queue"),
    ("messaging", "kafka://user:{s}@127.0.0.1:9092/topic"),
    ("messaging", "azqueue://acct:{s}@queue"),
    ("messaging", "pubsub://user:{s}@project/topics/t"),
    ("compute", "local://user:{s}@/tmp/jobs"),
    ("idempotency", "redis://:{s}@127.0.0.1:6379/0"),
    ("idempotency", "redis://user:{s}@127.0.0.1:6379/0"),
    ("idempotency", "sqlite://user:{s}@/tmp/idem.db"),
    ("idempotency", "dynamodb://user:{s}@table"),
]


@pytest.mark.parametrize(("domain", "template"), USERINFO_URLS, ids=[t for _, t in USERINFO_URLS])
def test_a_password_in_the_user_info_is_refused_naming_where_credentials_go(
    watch: Watch, domain: str, template: str
) -> None:
    url = template.format(s=SECRET)
    exc = watch.raises(url.split("://")[0], lambda: _open(domain, url), InvalidURL)
    assert "password" in str(exc) and "***" in str(exc)
    assert any(word in str(exc) for word in ("environment", "profile", "in code")), str(exc)
    watch.assert_clean()


URL_VALUED_OPTIONS = [
    ("storage", "s3://bucket?engine=fsspec&endpoint_url={v}"),
    ("storage", "s3://bucket?engine=obstore&endpoint_url={v}"),
    ("storage", "gs://bucket?endpoint_url={v}"),
    ("storage", "az://container/p?account=acct&auth=anonymous&blob_endpoint={v}"),
    ("messaging", "sqs://queue?region=us-east-1&endpoint_url={v}"),
    ("messaging", "azqueue://acct/queue?queue_endpoint={v}"),
    ("messaging", "pubsub://project/topics/t?endpoint={v}"),
    ("idempotency", "dynamodb://table?region=us-east-1&endpoint_url={v}"),
]
ENDPOINTS_WITH_USER_INFO = {
    "password": "http://user:{s}@127.0.0.1:9",
    "encoded": "http%3A%2F%2Fuser%3A{s}%40127.0.0.1%3A9",
    "token-as-user": "https://{s}@127.0.0.1:9",
}


@pytest.mark.parametrize("form", sorted(ENDPOINTS_WITH_USER_INFO))
@pytest.mark.parametrize(("domain", "template"), URL_VALUED_OPTIONS, ids=[t.split("?")[0] for _, t in URL_VALUED_OPTIONS])
def test_an_option_that_is_a_url_with_user_info_is_refused(watch: Watch, domain: str, template: str, form: str) -> None:
    url = template.format(v=ENDPOINTS_WITH_USER_INFO[form].format(s=SECRET))
    exc = watch.raises(url, lambda: _open(domain, url), InvalidURL)
    assert "user info" in str(exc)
    watch.assert_clean()


SECRET_OPTIONS = [
    # by name
    "mem://b?password={s}",
    "file:///tmp/portable-secrets?token={s}",
    "s3://bucket?engine=fsspec&aws_secret_access_key={s}",
    "s3://bucket?engine=obstore&secret_access_key={s}",
    "gs://bucket?client_secret={s}",
    "az://container/p?account=acct&account_key={s}",
    "az://container/p?account=acct&connection_string=AccountName%3Dacct%3BAccountKey%3D{s}",
    "az://container/p?account=acct&sig={s}",
    "sqs://queue?aws_session_token={s}",
    "kafka://127.0.0.1:9092/t?sasl_password={s}",
    # by %-encoded name
    "s3://bucket?engine=fsspec&aws%5Fsecret%5Faccess%5Fkey={s}",
    "mem://b?pass%77ord={s}",
    "mem://b?%74oken={s}",
    "az://container/p?account=acct&sas%5Ftoken={s}",
    "kafka://127.0.0.1:9092/t?sasl%5Fpassword={s}",
    # values with quotes and other delimiters
    "mem://b?token=abc'{s}",
    'mem://b?token=abc"{s}',
    "mem://b?token=abc)]}},{s}",
    "mem://b?token=%27{s}%27",
    "mem://b?api_token=abc%26{s}",
    # an unknown option whose name says secret
    "mem://b?my_signing_secret={s}",
    "sqlite:///tmp/q.db?name=x&session_token={s}",
]


@pytest.mark.parametrize("template", SECRET_OPTIONS)
def test_a_secret_option_is_refused_or_reported_masked(watch: Watch, template: str) -> None:
    url = template.format(s=SECRET)
    domain = "messaging" if url.startswith(("sqs", "kafka", "sqlite")) else "storage"
    watch.raises(url, lambda: _open(domain, url), InvalidURL)
    from portable.urls import parse_url

    parsed = parse_url(url)
    watch.obj("ParsedURL", parsed, attributes=False)
    watch.see("ParsedURL.without()", str(parsed.without("nothing")))
    watch.assert_clean()


def test_a_bad_value_of_a_secret_option_is_masked_in_the_conversion_error(watch: Watch) -> None:
    from portable.urls import parse_url

    watch.raises("take", lambda: parse_url(f"mem://b?key=abc'{SECRET}").take("key", int, 0), InvalidURL)
    watch.raises("take", lambda: parse_url(f"mem://b?%6Bey={SECRET}").take("key", float, 0.0), InvalidURL)
    watch.raises("twice", lambda: parse_url(f"mem://b?token={SECRET}&token={SECRET}"), InvalidURL)
    watch.raises("not a URL", lambda: parse_url(f"user:{SECRET}@host"), InvalidURL)
    watch.assert_clean()


# ---------------------------------------------------------------- configuration and environment
def _write_profile(path: Any) -> None:
    s = SECRET
    (path / "portable.toml").write_text(
        "[profiles.default]\n"
        f'storage = "s3://AKIAEXAMPLE:{s}@bucket?region=us-east-1"\n'
        f'queue = "kafka://user:{s}@127.0.0.1:9/topic"\n'
        f'jobs = "local://./jobs?workers=1&token={s}"\n'
        f'dead_letter = "sqs://dlq?endpoint_url=http://user:{s}@127.0.0.1:9"\n'
        f'idempotency = "redis://:{s}@127.0.0.1:6379/0"\n'
        "[profiles.other]\n"
        f'storage = "az://container/p?account=acct&sas_token=sv%3D2020%26sig%3D{s}"\n'
        f'queue = "mem://q?aws%5Fsecret%5Faccess%5Fkey={s}"\n'
        f'idempotency = "mem://x?password={s}"\n'
    )


def _cli(watch: Watch, label: str, *argv: str) -> tuple[int, str]:
    from portable.cli import main

    watch.output("before " + label)
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    return code, watch.output(label)


def test_profile_values_are_masked_in_config_show_doctor_and_every_error(watch: Watch, no_profile: Any) -> None:
    from portable.config import load_profile
    from portable.idempotency import open_store

    _write_profile(no_profile)
    for name in ("default", "other"):
        profile = load_profile(name)
        watch.obj(f"profile {name}", profile)
        watch.see(f"shown {name}", json.dumps(profile.shown()))
        code, out = _cli(watch, f"config show {name}", "--profile", name, "config", "show")
        assert code == 0 and '"storage"' in out
        code, out = _cli(watch, f"doctor {name}", "--profile", name, "doctor")
        assert code == 1 and "FAILED" in out
    watch.raises("open_bucket()", lambda: open_bucket(policy=ONCE), InvalidURL)
    watch.raises("open_topic()", lambda: open_topic(policy=ONCE), InvalidURL)
    watch.raises("open_store()", lambda: open_store(), InvalidURL)
    watch.raises("open_bucket(profile=other)", lambda: open_bucket(profile="other", policy=ONCE), InvalidURL)
    watch.raises("open_topic(profile=other)", lambda: open_topic(profile="other", policy=ONCE), InvalidURL)
    watch.raises("open_store(profile=other)", lambda: open_store(profile="other"), InvalidURL)
    watch.assert_clean()


def test_a_bad_profile_file_names_no_secret(watch: Watch, no_profile: Any) -> None:
    from portable.config import load_profile
    from portable.errors import ConfigError

    # the scheme forgotten; a list for a str
    (no_profile / "portable.toml").write_text(f'[profiles.default]\nstorage = "AKIAEXAMPLE:{SECRET}@bucket"\n')
    watch.raises("bad storage", lambda: load_profile(), ConfigError)
    (no_profile / "portable.toml").write_text(f'[profiles.default]\nstorage = ["s3://u:{SECRET}@b", "x"]\n')
    watch.raises("bad type", lambda: load_profile(), ConfigError)
    (no_profile / "portable.toml").write_text(f'[profiles.default]\npassword = "{SECRET}"\n')
    watch.raises("unknown key", lambda: load_profile(), ConfigError)
    code, _out = _cli(watch, "config show (bad file)", "config", "show")
    assert code == 1
    watch.assert_clean()


def test_portable_url_variables_are_masked(watch: Watch, no_profile: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from portable.config import load_profile

    monkeypatch.setenv("PORTABLE_STORAGE_URL", f"s3://AKIAEXAMPLE:{SECRET}@bucket")
    monkeypatch.setenv("PORTABLE_QUEUE_URL", f"sqs://queue?endpoint_url=http://u:{SECRET}@127.0.0.1:9")
    monkeypatch.setenv("PORTABLE_JOBS_URL", f"local://./jobs?pass%77ord={SECRET}")
    monkeypatch.setenv("PORTABLE_IDEMPOTENCY_URL", f"rediss://:{SECRET}@127.0.0.1:6380/0")
    monkeypatch.setenv("PORTABLE_DEAD_LETTER_URL", f"mem://dlq?token=abc'{SECRET}")
    watch.obj("profile", load_profile())
    code, out = _cli(watch, "config show", "config", "show")
    assert code == 0 and "s3://AKIAEXAMPLE:***@bucket" in out
    code, out = _cli(watch, "doctor", "doctor")
    assert code == 1 and out.count("FAILED") == 3
    code, out = _cli(watch, "ls", "ls")
    assert code == 1 and "InvalidURL" in out
    monkeypatch.setenv("PORTABLE_STORAGE_URL", f"AKIAEXAMPLE:{SECRET}@bucket/prefix")  # the scheme forgotten
    code, out = _cli(watch, "config show (bad variable)", "config", "show")
    assert code == 1
    watch.assert_clean()


def test_python_dash_m_portable_masks_the_profile(no_profile: Any) -> None:
    import os
    import subprocess
    import sys

    _write_profile(no_profile)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTABLE_")}
    for argv in (["config", "show"], ["doctor"], ["--profile", "other", "doctor"]):
        proc = subprocess.run(
            [sys.executable, "-m", "portable", *argv], cwd=no_profile, env=env, capture_output=True, timeout=120
        )
        out = proc.stdout.decode() + proc.stderr.decode()
        assert out.strip(), argv
        assert SECRET not in out, (argv, out)


# ---------------------------------------------------------------- mem:// and file://, with secrets around
def test_embedded_buckets_and_queues_show_no_secret_from_the_environment(
    watch: Watch, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_SECRET_ACCESS_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY", "KAFKA_SASL_PASSWORD"):
        monkeypatch.setenv(name, SECRET)
    for url in ("mem://secrets-test", f"file://{tmp_path}/objects"):
        bucket = open_bucket(url, policy=ONCE)
        bucket.put("a.txt", b"x", metadata={"m": "v"})
        watch.obj(url, bucket)
        watch.obj(f"{url} driver", bucket.driver)
        watch.obj(f"{url} head", bucket.head("a.txt"))
        watch.raises(f"{url} missing", lambda b=bucket: b.get("missing"), PortableError)
        watch.raises(f"{url} bad key", lambda b=bucket: b.put("../x", b""), PortableError)
    for url in ("mem://secrets-q", f"sqlite://{tmp_path}/q.db?name=q"):
        topic = open_topic(url, policy=ONCE)
        topic.publish(b"x", attributes={"a": "b"})
        sub = open_subscription(url, policy=ONCE)
        (message,) = sub.receive(max_messages=1, wait=1)
        watch.obj(f"{url} topic", topic)
        watch.obj(f"{url} subscription", sub)
        watch.obj(f"{url} message", message)
        message.ack()
    watch.assert_clean()


# ---------------------------------------------------------------- moto: S3 (both engines) and SQS
@pytest.fixture
def aws_env(moto_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The secret as the AWS secret key (moto accepts any), with a session token; no other AWS settings."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SQS", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEPORTABLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SECRET2)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    yield {"endpoint_url": moto_server.endpoints["endpoint_url"], "region": "us-east-1"}


def _setup(aws: dict[str, str], service: str, operation: str, **kwargs: Any) -> Any:
    """The test's own boto3 call that prepares the server, unwatched.

    It is the test's client, not portable's: its DEBUG log shows the session token
    (botocore logs signed headers), and whether portable's masking already covers
    botocore's loggers depends on which test ran first in the process.
    """
    import logging

    import boto3

    client = boto3.client(service, endpoint_url=aws["endpoint_url"], region_name=aws["region"])
    logging.disable(logging.CRITICAL)
    try:
        return getattr(client, operation)(**kwargs)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("engine", ["fsspec", "obstore"])
def test_s3_on_moto_shows_no_secret(watch: Watch, aws_env: dict[str, str], engine: str) -> None:
    name = f"secrets-{uuid.uuid4().hex[:10]}"
    _setup(aws_env, "s3", "create_bucket", Bucket=name)
    query = f"engine={engine}&region=us-east-1&endpoint_url={aws_env['endpoint_url']}"
    bucket = open_bucket(f"s3://{name}/p?{query}", policy=ONCE)
    watch.open_every_logger()  # type: ignore[attr-defined]
    bucket.put("a.txt", b"hello", metadata={"m": "v"})
    assert bucket.get("a.txt") == b"hello"
    watch.obj("head", bucket.head("a.txt"))
    assert [e.key for e in bucket.list("")] == ["a.txt"]
    with bucket.open("b.bin", "wb") as out:
        out.write(b"x" * 1000)
    watch.obj("bucket", bucket)
    watch.obj("driver", bucket.driver)
    watch.raises("missing key", lambda: bucket.get("missing"), PortableError)
    watch.raises("stale etag", lambda: bucket.put("a.txt", b"x", if_match='"0"'), PortableError)
    missing = open_bucket(f"s3://{name}-missing?{query}", policy=ONCE)
    watch.raises("missing bucket", lambda: missing.get("k"), PortableError)
    unreachable = open_bucket(f"s3://{name}?engine={engine}&region=us-east-1&endpoint_url={UNREACHABLE}", policy=ONCE)
    watch.obj("unreachable driver", unreachable.driver)
    watch.raises("unreachable endpoint", lambda: unreachable.get("k"), PortableError)
    bucket.close()
    watch.assert_clean()


@pytest.fixture
def env_endpoint_with_user_info(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """AWS_ENDPOINT_URL (the SDKs' own variable, which portable does not read) pointing at moto with user info."""
    name = f"secrets-{uuid.uuid4().hex[:10]}"
    _setup(aws_env, "s3", "create_bucket", Bucket=name)
    host = aws_env["endpoint_url"].split("://")[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://user:{SECRET}@{host}")
    return name


@pytest.mark.parametrize("engine", ["fsspec", "obstore"])
def test_an_sdk_endpoint_variable_with_user_info_is_masked_in_errors_and_logs(
    watch: Watch, env_endpoint_with_user_info: str, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    url = f"s3://{env_endpoint_with_user_info}?engine={engine}&region=us-east-1&addressing_style=path"
    for label in ("moto", "unreachable"):
        try:
            bucket = open_bucket(url, policy=ONCE)
            watch.obj("bucket", bucket, attributes=False)
            bucket.put("a.txt", b"x")
            bucket.get("a.txt")
            bucket.get("missing")
        except PortableError as exc:  # refused, unauthorised (aiohttp refuses user info plus a signature), missing
            watch.error(label, exc, traceback.format_exc())
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://user:{SECRET}@127.0.0.1:9")
    watch.assert_clean()


@pytest.mark.parametrize(
    "engine",
    [
        "fsspec",
        "obstore",
    ],
)
def test_an_sdk_endpoint_variable_with_user_info_is_masked_in_the_driver(
    watch: Watch, env_endpoint_with_user_info: str, engine: str
) -> None:
    url = f"s3://{env_endpoint_with_user_info}?engine={engine}&region=us-east-1&addressing_style=path"
    try:
        driver = open_bucket(url, policy=ONCE).driver
    except PortableError as exc:  # refusing it is as good as masking it
        watch.error("open", exc, traceback.format_exc())
    else:
        watch.obj("driver", driver)
    watch.assert_clean()


def test_sqs_on_moto_shows_no_secret(watch: Watch, aws_env: dict[str, str]) -> None:
    name = f"secrets-{uuid.uuid4().hex[:10]}"
    _setup(aws_env, "sqs", "create_queue", QueueName=name)
    query = f"region=us-east-1&endpoint_url={aws_env['endpoint_url']}"
    topic = open_topic(f"sqs://{name}?{query}", policy=ONCE)
    watch.open_every_logger()  # type: ignore[attr-defined]
    topic.publish(b"hello", attributes={"a": "b"})
    sub = open_subscription(f"sqs://{name}?{query}", policy=ONCE)
    (message,) = sub.receive(max_messages=1, wait=5)
    for label, obj in (("topic", topic), ("subscription", sub), ("message", message), ("driver", topic._driver), ("side", topic._side)):
        watch.obj(label, obj)
    message.ack()
    watch.raises("missing queue", lambda: open_topic(f"sqs://{name}-missing?{query}", policy=ONCE).publish(b"x"), PortableError)
    watch.raises(
        "unreachable endpoint",
        lambda: open_topic(f"sqs://{name}?region=us-east-1&endpoint_url={UNREACHABLE}", policy=ONCE).publish(b"x"),
        PortableError,
    )
    watch.assert_clean()


# ---------------------------------------------------------------- Azurite: bad and good keys
@pytest.fixture
def azure_env(azurite: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Azurite's endpoints; the secret as every Azure key variable (a wrong key: Azurite answers 403)."""
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_KEY", SECRET)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", SECRET)
    monkeypatch.setenv("PT_SECRETS_GOOD_KEY", azurite.endpoints["account_key"])
    return dict(azurite.endpoints)


def _container(azure: dict[str, str]) -> str:
    from azure.storage.blob import BlobServiceClient

    name = f"secrets-{uuid.uuid4().hex[:10]}"
    BlobServiceClient.from_connection_string(azure["connection_string"]).create_container(name)
    return name


@pytest.mark.parametrize("engine", ["fsspec", "obstore"])
def test_azure_blob_on_azurite_shows_no_secret(
    watch: Watch, azure_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    container = _container(azure_env)
    where = f"account={azure_env['account_name']}&blob_endpoint={azure_env['blob_endpoint']}&engine={engine}"
    watch.secrets = (SECRET, SECRET2, azure_env["account_key"])  # the working key must not show either
    good = open_bucket(f"az://{container}/p?{where}&account_key_env=PT_SECRETS_GOOD_KEY", policy=ONCE)
    watch.open_every_logger()  # type: ignore[attr-defined]
    good.put("a.txt", b"hello", metadata={"m": "v"})
    assert good.get("a.txt") == b"hello"
    watch.obj("bucket", good)
    watch.obj("driver", good.driver)
    watch.raises("missing key", lambda: good.get("missing"), PortableError)
    bad = open_bucket(f"az://{container}/p?{where}", policy=ONCE)  # AZURE_STORAGE_ACCOUNT_KEY: the wrong key
    watch.obj("bad driver", bad.driver)
    watch.raises("bad key", lambda: bad.get("a.txt"), PortableError)
    watch.raises("bad key put", lambda: bad.put("b.txt", b"x"), PortableError)
    monkeypatch.setenv(
        "PT_SECRETS_CONN",
        f"DefaultEndpointsProtocol=http;AccountName={azure_env['account_name']};AccountKey={SECRET};"
        f"BlobEndpoint={azure_env['blob_endpoint']}",
    )
    by_conn = open_bucket(f"az://{container}/p?engine={engine}&connection_string_env=PT_SECRETS_CONN", policy=ONCE)
    watch.obj("connection-string driver", by_conn.driver)
    watch.raises("bad key in a connection string", lambda: by_conn.get("a.txt"), PortableError)
    unreachable = open_bucket(
        f"az://{container}/p?account={azure_env['account_name']}&blob_endpoint={UNREACHABLE}/"
        f"{azure_env['account_name']}&engine={engine}",
        policy=ONCE,
    )
    watch.raises("unreachable", lambda: unreachable.get("a.txt"), PortableError)
    watch.assert_clean()


def test_azure_queue_on_azurite_shows_no_secret(watch: Watch, azure_env: dict[str, str]) -> None:
    name = f"secrets-{uuid.uuid4().hex[:10]}"
    watch.secrets = (SECRET, SECRET2, azure_env["account_key"])
    account = azure_env["account_name"]
    good = f"azqueue://{account}/{name}?queue_endpoint={azure_env['queue_endpoint']}&account_key_env=PT_SECRETS_GOOD_KEY"
    topic = open_topic(good + "&create=true", policy=ONCE)
    watch.open_every_logger()  # type: ignore[attr-defined]
    topic.publish(b"hello")
    sub = open_subscription(good, policy=ONCE)
    (message,) = sub.receive(max_messages=1, wait=5)
    for label, obj in (("topic", topic), ("subscription", sub), ("message", message), ("driver", topic._driver), ("side", topic._side)):
        watch.obj(label, obj)
    message.ack()
    bad = f"azqueue://{account}/{name}?queue_endpoint={azure_env['queue_endpoint']}"  # AZURE_STORAGE_ACCOUNT_KEY
    watch.raises("bad key", lambda: open_topic(bad, policy=ONCE).publish(b"x"), PortableError)
    watch.assert_clean()


# ---------------------------------------------------------------- Kafka: settings and an unreachable broker
KAFKA_SASL = (
    "kafka://127.0.0.1:9/secrets?security_protocol=SASL_PLAINTEXT&sasl_mechanism=PLAIN&sasl_username=user"
    "&connect_timeout=1&request_timeout=2&delivery_timeout=3&create=false"
)


def test_kafka_settings_and_clients_show_no_password(watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", SECRET)
    from portable.messaging import open_driver

    driver = open_driver(KAFKA_SASL)  # settings only: no connection yet
    watch.obj("driver", driver)
    watch.obj("settings", driver.settings)
    watch.see("url_for", driver.settings.url_for("other", "g"))
    watch.raises("unreachable broker", lambda: open_topic(KAFKA_SASL, policy=ONCE).publish(b"x"), PortableError)
    watch.assert_clean()


def test_kafka_python_logs_its_configuration_masked(watch: Watch) -> None:
    """kafka-python logs its whole configuration, sasl_plain_password included, at DEBUG."""
    from kafka.admin import KafkaAdminClient

    from portable._logging import install_secret_masking

    install_secret_masking()
    try:
        KafkaAdminClient(
            bootstrap_servers="127.0.0.1:9",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="user",
            sasl_plain_password=SECRET,
            request_timeout_ms=1000,
            api_version_auto_timeout_ms=1000,
            connections_max_idle_ms=2000,
        ).close()
    except Exception as exc:
        watch.error("admin client", exc, traceback.format_exc())
    assert any("configuration" in line for line in watch.handler.lines), watch.handler.lines[:5]
    watch.assert_clean()


def test_botocore_logs_an_endpoint_with_a_password_masked(watch: Watch) -> None:
    """botocore logs the endpoint it is given at DEBUG; a user's own client logs through the same loggers."""
    import boto3
    from botocore.config import Config

    from portable._logging import install_secret_masking

    install_secret_masking()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://user:{SECRET}@127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key=SECRET2,
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1),
    )
    try:
        client.head_bucket(Bucket="b")
    except Exception as exc:
        from portable.driver.redaction import scrub_exception_chain

        scrub_exception_chain(exc)
        watch.error("boto3", exc, traceback.format_exc())
    assert any("127.0.0.1" in line for line in watch.handler.lines)
    watch.assert_clean()


def test_a_record_logged_with_an_exception_is_masked(watch: Watch) -> None:
    from portable._logging import install_secret_masking

    install_secret_masking()
    log = logging.getLogger("botocore.secrets-test")
    try:
        raise ConnectionError(f"could not reach https://user:{SECRET}@host/?sig={SECRET}")
    except ConnectionError:
        log.exception("failed: %s", {"password": SECRET, "url": f"s3://b?token={SECRET}"})
    log.debug("config %r", {"sasl_plain_password": SECRET, "nested": {"client_secret": SECRET}})
    log.debug(f"formatted up front: token={SECRET}&x=1")
    log.debug("bad format %d", f"password={SECRET}")
    assert len(watch.handler.lines) >= 3
    watch.assert_clean()
