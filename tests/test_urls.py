import pytest

from portable import InvalidURL, MissingDependency, UnknownScheme, open_bucket
from portable.urls import known_schemes, load_driver_factory, parse_url


def test_parse_url_splits_parts_and_options():
    u = parse_url("s3://bucket/pre/fix?region=eu-west-1&endpoint_url=http://127.0.0.1:9000")
    assert (u.scheme, u.netloc, u.path) == ("s3", "bucket", "/pre/fix")
    assert u.options == {"region": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000"}


def test_take_converts_and_done_reports_unknown_options():
    u = parse_url("local://?workers=4&verbose=yes&typo=1")
    assert u.take("workers", int, 1) == 4
    assert u.take("verbose", bool, False) is True
    with pytest.raises(InvalidURL, match="typo") as info:
        u.done()
    assert "workers" in str(info.value)


def test_take_names_the_option_and_type():
    with pytest.raises(InvalidURL, match=r"workers=.*int"):
        parse_url("local://?workers=many").take("workers", int, 1)


def test_a_secret_option_value_is_never_shown():
    u = parse_url("az://c?account_key=SUPERSECRET&connection_string=AccountKey=SUPERSECRET2")
    with pytest.raises(InvalidURL) as info:
        u.done()
    assert "SUPERSECRET" not in str(info.value)
    assert "SUPERSECRET" not in repr(u)
    with pytest.raises(InvalidURL) as info:
        u.take("account_key", int, 0)
    assert "SUPERSECRET" not in str(info.value)


def test_not_a_url():
    with pytest.raises(InvalidURL, match="scheme://"):
        parse_url("just/a/path")


def test_unknown_scheme_lists_known_and_suggests_the_closest():
    with pytest.raises(UnknownScheme) as info:
        open_bucket("s4://bucket")
    msg = str(info.value)
    assert "Did you mean s3://" in msg
    assert "file://" in msg and "mem://" in msg


def test_known_schemes_are_sorted_and_include_builtins():
    names = known_schemes("storage")
    assert names == sorted(names)
    assert {"mem", "file", "s3", "gs", "az"} <= set(names)
    assert {"mem", "sqlite", "sqs", "pubsub", "kafka", "azqueue"} <= set(known_schemes("messaging"))
    assert {"local", "batch", "dask"} <= set(known_schemes("compute"))
    assert {"mem", "sqlite", "redis", "rediss", "unix", "dynamodb", "firestore"} <= set(known_schemes("idempotency"))


def test_an_idempotency_url_of_a_storage_scheme_is_served_by_storage():
    from portable.urls import serving_domain

    assert serving_domain("idempotency", "mem") == "idempotency"  # the in-process store, not a bucket
    assert serving_domain("idempotency", "sqlite") == "idempotency"
    assert serving_domain("idempotency", "file") == "storage"
    assert serving_domain("idempotency", "S3") == "storage"
    assert serving_domain("idempotency", "chaos+mem") == "storage"  # a chaos bucket
    assert serving_domain("storage", "chaos+mem") == "storage"
    assert serving_domain("storage", "file") == "storage"
    with pytest.raises(UnknownScheme, match="no storage driver for sqlite://"):
        serving_domain("storage", "sqlite")  # storage falls back to nothing


def test_an_unknown_idempotency_scheme_lists_stores_and_buckets_and_suggests_the_closest():
    from portable.urls import serving_domain

    with pytest.raises(UnknownScheme) as info:
        serving_domain("idempotency", "reddis")
    msg = str(info.value)
    assert msg.startswith("no idempotency store for reddis://. Did you mean redis://?")
    assert "sqlite://" in msg and "or any storage URL: " in msg and "s3://" in msg
    with pytest.raises(UnknownScheme, match=r"Did you mean s3://\?"):
        serving_domain("idempotency", "s4")  # the closest may be a bucket scheme


def test_a_missing_idempotency_store_names_the_pip_extra(monkeypatch):
    import portable.urls as urls

    monkeypatch.setitem(urls._BUILTIN["idempotency"], "nosuch", ("portable_nosuch.x:Store", "nosuch"))
    with pytest.raises(MissingDependency, match=r"nosuch:// needs the nosuch adapter: pip install 'portable-cloud\[nosuch\]'"):
        load_driver_factory("idempotency", "nosuch")


def test_idempotency_urls_name_no_wrapper():
    with pytest.raises(UnknownScheme, match="no idempotency store for chaos\\+mem://"):
        load_driver_factory("idempotency", "chaos+mem")


def test_builtin_factories_load_lazily():
    from portable.embedded.memory import MemoryStorage

    assert load_driver_factory("storage", "mem") is MemoryStorage


def test_a_missing_adapter_names_the_pip_extra(monkeypatch):
    import portable.urls as urls

    monkeypatch.setitem(urls._BUILTIN["storage"], "nosuch", ("portable_nosuch.x:Driver", "nosuch"))
    with pytest.raises(MissingDependency, match=r"pip install 'portable-cloud\[nosuch\]'"):
        load_driver_factory("storage", "nosuch")


def test_unknown_options_fail_before_any_request(tmp_path):
    with pytest.raises(InvalidURL, match="fsync"):
        open_bucket(f"file://{tmp_path}?fsnyc=1")


def test_storage_engines_are_chosen_by_option_or_installation():
    from portable.urls import parse_url, storage_engine

    engine, rest = storage_engine(parse_url("s3://b/p?engine=fsspec&region=x"))
    assert engine == "fsspec" and rest.options == {"region": "x"}
    with pytest.raises(InvalidURL, match="obstore"):
        storage_engine(parse_url("s3://b?engine=rocket"))
    with pytest.raises(InvalidURL, match="single engine"):
        storage_engine(parse_url("file:///tmp/x?engine=obstore"))
    engine, _ = storage_engine(parse_url("gs://b"))
    assert engine in ("obstore", "fsspec")


def test_without_keeps_values_holding_reserved_characters():
    u = parse_url("s3://b/p?engine=fsspec&endpoint_url=http%3A%2F%2Fh%3A1%2F%3Fa%3D1%26b%3D2&region=x")
    rest = u.without("engine")
    assert rest.options == {"endpoint_url": "http://h:1/?a=1&b=2", "region": "x"}
    assert rest.path == "/p" and rest.netloc == "b"


# -- credentials in URLs -------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    ["s3://AKIA:SUPERSECRET@bucket", "mem://u:SUPERSECRET@b", "redis://:SUPERSECRET@h:6379/0", "x-unknown://u:SUPERSECRET@h"],
)
def test_a_password_in_the_user_info_is_refused_by_parse_url_for_every_scheme(url):
    with pytest.raises(InvalidURL, match=r"a password in a .*:// URL is not accepted") as info:
        parse_url(url)
    assert "SUPERSECRET" not in str(info.value) and ":***@" in str(info.value)


def test_the_refusal_says_where_the_schemes_credentials_go():
    from portable.urls import where_credentials_go

    with pytest.raises(InvalidURL, match="AWS_SECRET_ACCESS_KEY"):
        parse_url("s3://AKIA:x@bucket")
    with pytest.raises(InvalidURL, match="account_key_env"):
        parse_url("azqueue://acct:x@queue")
    with pytest.raises(InvalidURL, match="sasl_password_env"):
        parse_url("chaos+kafka://u:x@h:9092/t")  # a wrapper: the inner scheme's advice
    assert "environment" in where_credentials_go("nosuch")


def test_a_user_name_alone_is_left_to_the_scheme():
    assert parse_url("abfs://container@acct.dfs.core.windows.net/p").netloc == "container@acct.dfs.core.windows.net"


@pytest.mark.parametrize(
    "value",
    ["http://u:SUPERSECRET@h:9", "http%3A%2F%2Fu%3ASUPERSECRET%40h%3A9", "https://SUPERSECRET@h", " HTTP://u:SUPERSECRET@h"],
)
def test_an_option_that_is_a_url_with_user_info_is_refused(value):
    with pytest.raises(InvalidURL, match="option endpoint_url holds a URL with user info") as info:
        parse_url(f"s3://bucket?endpoint_url={value}")
    assert "SUPERSECRET" not in str(info.value)


def test_options_that_can_only_be_secrets_are_refused_when_a_driver_opens():
    parse_url("mem://b?password=SUPERSECRET")  # parsing alone keeps it (wrappers, tools)
    for url in ("mem://b?password=SUPERSECRET", "mem://b?aws%5Fsecret%5Faccess%5Fkey=SUPERSECRET"):
        with pytest.raises(InvalidURL, match="would put a secret in the URL") as info:
            open_bucket(url)
        assert "SUPERSECRET" not in str(info.value)


def test_a_secret_option_masked_after_decoding_in_every_message():
    u = parse_url("mem://b?aws%5Fsecret%5Faccess%5Fkey=SUPERSECRET&token=abc'SUPERSECRET2")
    with pytest.raises(InvalidURL) as info:
        u.done()
    assert "SUPERSECRET" not in str(info.value) + repr(u) + str(u)


def test_a_conversion_error_chains_no_error_quoting_the_value():
    with pytest.raises(InvalidURL) as info:
        parse_url("mem://b?key=SUPERSECRET").take("key", int, 0)
    assert "SUPERSECRET" not in str(info.value)
    assert info.value.__context__ is None and info.value.__cause__ is None
