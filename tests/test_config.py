import json
import textwrap

import pytest

from portable import ConfigError, MissingCapability, open_bucket
from portable.config import DEFAULTS, load_profile


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("PORTABLE_CONFIG", "PORTABLE_PROFILE", "PORTABLE_STORAGE_URL", "PORTABLE_QUEUE_URL", "PORTABLE_JOBS_URL", "PORTABLE_STORAGE_ENGINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def test_no_configuration_gives_the_embedded_defaults(clean_env):
    prof = load_profile()
    assert (prof.storage, prof.queue, prof.jobs, prof.source) == (
        DEFAULTS["storage"],
        DEFAULTS["queue"],
        DEFAULTS["jobs"],
        "defaults",
    )


def test_profiles_from_portable_toml_and_env_selection(clean_env, monkeypatch):
    write(
        clean_env / "portable.toml",
        """
        [profiles.default]
        storage = "mem://a"
        [profiles.other]
        storage = "mem://b"
        queue = "mem://q"
        [profiles.other.resilience]
        max_attempts = 7
        breaker = { failure_rate = 0.25, window = 40, open_seconds = 5 }
        """,
    )
    assert load_profile().storage == "mem://a"
    monkeypatch.setenv("PORTABLE_PROFILE", "other")
    prof = load_profile()
    assert (prof.name, prof.storage, prof.queue) == ("other", "mem://b", "mem://q")
    assert prof.resilience.retry.max_attempts == 7
    assert prof.resilience.breaker is not None and prof.resilience.breaker.window == 40


def test_env_overrides_single_entries(clean_env, monkeypatch):
    monkeypatch.setenv("PORTABLE_STORAGE_URL", "mem://override")
    assert load_profile().storage == "mem://override"
    assert open_bucket().url == "mem://override"


def test_portable_config_names_the_file(clean_env, monkeypatch):
    path = write(clean_env / "elsewhere.toml", '[profiles.default]\nstorage = "mem://x"\n')
    monkeypatch.setenv("PORTABLE_CONFIG", str(path))
    assert load_profile().source == str(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[profiles.default]\nstorage = 3\n", r"profiles\.default\.storage must be a provider URL"),
        ("[profiles.default]\nstorge = 'mem://'\n", r"unknown key\(s\) storge"),
        ("[profiles.default.resilience]\nmax_attempts = 'x'\n", r"resilience\.max_attempts = 'x': must be a whole number"),
        ("[profiles.default.resilience]\nmax_attempts = 0\n", r"resilience\.max_attempts = 0: must be a whole number >= 1"),
        ("[profiles.default.resilience]\nbreaker = { rate = 1 }\n", r"unknown key\(s\) rate in profiles\.default\.resilience\.breaker"),
        ("[profiles.default]\nrequires = 'x'\n", r"requires must be a list"),
        ("[profiles\n", r"not valid TOML"),
        ("[other]\n", r"unknown top-level"),
    ],
)
def test_a_bad_file_gets_one_error_naming_file_key_and_expectation(clean_env, text, expected):
    write(clean_env / "portable.toml", text)
    with pytest.raises(ConfigError, match=expected) as info:
        load_profile()
    assert "portable.toml" in str(info.value)


def test_an_unknown_named_profile_lists_the_defined_ones(clean_env):
    write(clean_env / "portable.toml", '[profiles.prod]\nstorage = "mem://"\n')
    with pytest.raises(ConfigError, match="defined: prod") as info:
        load_profile("staging")
    assert "[profiles.staging]" in str(info.value) and str(clean_env / "portable.toml") in str(info.value)


def test_missing_portable_config_file(clean_env, monkeypatch):
    monkeypatch.setenv("PORTABLE_CONFIG", str(clean_env / "nope.toml"))
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        load_profile()


def test_requirements_are_checked_when_the_bucket_opens(clean_env):
    write(
        clean_env / "portable.toml",
        '[profiles.default]\nstorage = "mem://r"\nrequires = ["conditional_create", "signed_urls"]\n',
    )
    with pytest.raises(MissingCapability, match="signed_urls"):
        open_bucket()


def test_secrets_are_masked_in_repr_and_shown_config(clean_env):
    write(
        clean_env / "portable.toml",
        """
        [profiles.default]
        storage = "az://c?account=a&sas_token=SIGSECRET"
        queue = "kafka://user:PASSWORD1@host:9092/t"
        """,
    )
    prof = load_profile()
    shown = json.dumps(prof.shown()) + repr(prof)
    assert "SIGSECRET" not in shown and "PASSWORD1" not in shown
    assert "***" in shown


def test_the_profile_picks_the_storage_engine(clean_env, monkeypatch):
    from portable.urls import with_default_engine

    write(clean_env / "portable.toml", '[profiles.default]\nstorage = "mem://x"\nstorage_engine = "fsspec"\n')
    assert load_profile().storage_engine == "fsspec"
    monkeypatch.setenv("PORTABLE_STORAGE_ENGINE", "obstore")
    assert load_profile().storage_engine == "obstore"
    assert with_default_engine("s3://b/p?region=x", "fsspec") == "s3://b/p?region=x&engine=fsspec"
    assert with_default_engine("s3://b?engine=obstore", "fsspec") == "s3://b?engine=obstore"
    assert with_default_engine("file:///tmp/x", "fsspec") == "file:///tmp/x"
    monkeypatch.setenv("PORTABLE_STORAGE_ENGINE", "turbo")
    with pytest.raises(ConfigError, match="fsspec, obstore"):
        load_profile()


def test_the_opendal_engine_is_named_for_s3_and_refused_elsewhere(clean_env):
    """A profile may name the opendal engine; it serves s3:// only, so a gs:// URL under that profile
    is an error naming the engines gs:// has, never a silent fallback to another engine."""
    from portable.errors import InvalidURL
    from portable.urls import parse_url, storage_engine, with_default_engine

    write(clean_env / "portable.toml", '[profiles.default]\nstorage = "mem://x"\nstorage_engine = "opendal"\n')
    assert load_profile().storage_engine == "opendal"
    assert storage_engine(parse_url(with_default_engine("s3://b?region=x", "opendal")))[0] == "opendal"
    with pytest.raises(InvalidURL, match=r"unknown engine 'opendal' for gs://; choose one of fsspec, obstore"):
        storage_engine(parse_url(with_default_engine("gs://b", "opendal")))


def test_a_bad_storage_engine_in_the_file(clean_env):
    write(clean_env / "portable.toml", '[profiles.default]\nstorage_engine = "rocket"\n')
    with pytest.raises(ConfigError, match=r"storage_engine must be one of fsspec, obstore"):
        load_profile()


# -- resilience settings: every bad value is refused, naming the file and the key ---------------


def test_a_negative_deadline_names_the_file_and_the_key(clean_env, monkeypatch):
    write(clean_env / "portable.toml", '[profiles.prod]\nstorage = "mem://p"\n[profiles.prod.resilience]\ndeadline = -5\n')
    monkeypatch.setenv("PORTABLE_PROFILE", "prod")
    with pytest.raises(ConfigError) as info:
        load_profile()
    assert str(info.value) == "portable.toml: profiles.prod.resilience.deadline = -5: must be a positive number of seconds"


BAD_RESILIENCE = [
    ("max_attempts", "0"), ("max_attempts", "-1"), ("max_attempts", "1.5"), ("max_attempts", "true"),
    ("initial_backoff", "inf"), ("initial_backoff", "nan"), ("initial_backoff", "-1"),
    ("max_backoff", "inf"), ("max_backoff", "-0.5"), ("max_backoff", "'20'"),
    ("multiplier", "0.5"), ("multiplier", "inf"),
    ("timeout", "0"), ("timeout", "inf"), ("timeout", "nan"), ("timeout", "-3"),
    ("max_retry_after", "inf"), ("max_retry_after", "-1"),
    ("deadline", "-5"), ("deadline", "0"), ("deadline", "inf"), ("deadline", "nan"), ("deadline", "-inf"),
    ("breaker.failure_rate", "0"), ("breaker.failure_rate", "1.5"), ("breaker.failure_rate", "nan"),
    ("breaker.window", "0"), ("breaker.window", "2.5"),
    ("breaker.min_calls", "0"), ("breaker.min_calls", "30"),  # more than the window of 20: it would never open
    ("breaker.open_seconds", "inf"), ("breaker.open_seconds", "-1"),
    ("breaker.half_open_probes", "0"),
    ("retry_budget.ratio", "-0.1"), ("retry_budget.ratio", "1.5"), ("retry_budget.ratio", "nan"),
    ("retry_budget.min_per_second", "inf"), ("retry_budget.min_per_second", "-1"),
    ("retry_budget.max_tokens", "0.5"), ("retry_budget.max_tokens", "inf"),
]


@pytest.mark.parametrize(("key", "value"), BAD_RESILIENCE, ids=[f"{k}={v}" for k, v in BAD_RESILIENCE])
def test_every_resilience_setting_refuses_bad_values_naming_file_and_key(clean_env, key, value):
    table, _, name = key.rpartition(".")
    if table:
        text = f"[profiles.default.resilience.{table}]\n{name} = {value}\n"
    else:
        text = f"[profiles.default.resilience]\n{name} = {value}\n"
    write(clean_env / "portable.toml", text)
    with pytest.raises(ConfigError) as info:
        load_profile()
    message = str(info.value)
    shown = value.strip("'").replace("true", "True")
    assert message.startswith(f"portable.toml: profiles.default.resilience.{key} = "), message
    assert shown in message and ": must be " in message


@pytest.mark.parametrize(("key", "value"), [("breaker", "'yes'"), ("retry_budget", "3")])
def test_breaker_and_retry_budget_must_be_tables_or_booleans(clean_env, key, value):
    write(clean_env / "portable.toml", f"[profiles.default.resilience]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=rf"^portable\.toml: profiles\.default\.resilience\.{key} = .*: must be a table"):
        load_profile()


def test_infinite_and_nan_values_are_refused_in_code_too():
    from portable.resilience import BreakerPolicy, ResiliencePolicy, RetryBudget, RetryPolicy

    for make in (
        lambda: RetryPolicy(max_backoff=float("inf")),
        lambda: RetryPolicy(initial_backoff=float("nan")),
        lambda: RetryPolicy(timeout=float("inf")),
        lambda: BreakerPolicy(open_seconds=float("inf")),
        lambda: BreakerPolicy(failure_rate=float("nan")),
        lambda: ResiliencePolicy(deadline=float("nan")),
        lambda: RetryBudget(ratio=float("inf")),
        lambda: RetryBudget(max_tokens=float("nan")),
    ):
        with pytest.raises(ConfigError, match=r" = (inf|nan): must be"):
            make()


def test_the_retry_budget_is_configured_per_profile_and_shown(clean_env):
    write(
        clean_env / "portable.toml",
        """
        [profiles.default.resilience]
        retry_budget = { ratio = 0.1, min_per_second = 2, max_tokens = 20 }
        [profiles.unbudgeted.resilience]
        retry_budget = false
        """,
    )
    budget = load_profile().resilience.retry_budget
    assert budget is not None and (budget.ratio, budget.min_per_second, budget.max_tokens) == (0.1, 2.0, 20.0)
    assert load_profile().shown()["resilience"]["retry_budget"] == {"ratio": 0.1, "min_per_second": 2.0, "max_tokens": 20.0}
    assert load_profile("unbudgeted").resilience.retry_budget is None
    assert load_profile("unbudgeted").shown()["resilience"]["retry_budget"] is None


# -- profiles and requirements that would silently mean something else --------------------------


def test_a_named_profile_without_any_configuration_is_an_error_naming_where_it_looked(clean_env, monkeypatch):
    monkeypatch.setenv("PORTABLE_PROFILE", "prod")
    with pytest.raises(ConfigError) as info:
        load_profile()
    message = str(info.value)
    assert "'prod'" in message and "PORTABLE_PROFILE" in message
    assert "PORTABLE_CONFIG (not set)" in message and str(clean_env / "portable.toml") in message


def test_open_bucket_with_a_named_profile_and_no_configuration_touches_no_disk(clean_env):
    with pytest.raises(ConfigError, match=r"profile 'prod' \(asked for by the profile argument\) is not defined"):
        open_bucket(profile="prod")
    assert list(clean_env.iterdir()) == []  # not the embedded local folder


def test_a_named_profile_missing_from_portable_config_names_that_file(clean_env, monkeypatch):
    path = write(clean_env / "service.toml", '[profiles.staging]\nstorage = "mem://s"\n')
    monkeypatch.setenv("PORTABLE_CONFIG", str(path))
    monkeypatch.setenv("PORTABLE_PROFILE", "prod")
    with pytest.raises(ConfigError, match=rf"no profile \[profiles\.prod\].*defined: staging.*PORTABLE_CONFIG={path}"):
        load_profile()
    with pytest.raises(ConfigError, match=r"\[profiles\.default\]"):
        load_profile("default")  # named, so it must be defined too


def test_only_the_unnamed_default_falls_back_to_the_embedded_defaults(clean_env):
    assert load_profile().source == "defaults"  # no configuration at all
    write(clean_env / "portable.toml", '[profiles.prod]\nstorage = "mem://p"\n')
    fallback = load_profile()  # a file, but nobody named a profile and it defines no default
    assert fallback.storage == DEFAULTS["storage"]
    assert fallback.source == "defaults (portable.toml defines no [profiles.default])"


def test_an_unknown_capability_in_requires_is_refused_with_the_closest_name(clean_env):
    write(clean_env / "portable.toml", '[profiles.default]\nstorage = "mem://r"\nrequires = ["conditonal_create"]\n')
    with pytest.raises(ConfigError) as info:
        load_profile()
    message = str(info.value)
    assert message.startswith("portable.toml: profiles.default.requires: unknown capability 'conditonal_create'")
    assert "did you mean conditional_create?" in message


def test_requires_from_every_domain_are_known(clean_env):
    write(
        clean_env / "portable.toml",
        '[profiles.default]\nstorage = "mem://r"\nrequires = ["conditional_create", "native_dead_letter", "idempotent_submit"]\n',
    )
    assert load_profile().requires == ("conditional_create", "native_dead_letter", "idempotent_submit")


def test_an_unknown_capability_in_a_profile_made_in_code_is_refused_when_the_bucket_opens(clean_env):
    from portable.config import Profile

    profile = Profile(name="code", storage="mem://c", queue="mem://c", jobs="local://", requires=("signed_url",))
    with pytest.raises(ConfigError, match=r"unknown capability 'signed_url' \(did you mean signed_urls\?\)"):
        open_bucket(profile=profile)


def test_the_configuration_page_is_a_valid_configuration_and_its_errors_are_the_real_ones(clean_env):
    from tests.docs_pages import DOCS, blocks

    page = DOCS / "configuration.md"
    write(clean_env / "portable.toml", "\n".join(b.code for b in blocks(page, "toml")))
    aws = load_profile("aws")
    assert aws.resilience.retry_budget is not None and aws.resilience.retry_budget.max_tokens == 100
    shown = [line for b in blocks(page, "text") for line in b.code.splitlines() if line.startswith("portable.toml: profiles.")]
    assert len(shown) == 5
    for line in shown:
        where, _, rest = line.removeprefix("portable.toml: profiles.prod.").partition(" = ")
        if where.startswith("requires"):
            text = '[profiles.prod]\nrequires = ["conditonal_create"]\n'
        else:
            *tables, key = ["resilience", *where.split(".")[1:]]
            value = rest.split(":")[0]
            text = f"[profiles.prod.{'.'.join(tables)}]\n{key} = {value}\n"
        write(clean_env / "portable.toml", text)
        with pytest.raises(ConfigError) as info:
            load_profile("prod")
        assert str(info.value).startswith(line.removesuffix("..."))
