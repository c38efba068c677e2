import json
import textwrap

import pytest

from portable import ConfigError, MissingCapability, NotFound, open_bucket
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
        ("[profiles.default.resilience]\nmax_attempts = 'x'\n", r"resilience\.max_attempts must be a int"),
        ("[profiles.default.resilience]\nmax_attempts = 0\n", r"max_attempts must be >= 1"),
        ("[profiles.default.resilience]\nbreaker = { rate = 1 }\n", r"unknown key\(s\) rate in breaker"),
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
    with pytest.raises(NotFound, match="defined: prod"):
        load_profile("staging")


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


def test_a_bad_storage_engine_in_the_file(clean_env):
    write(clean_env / "portable.toml", '[profiles.default]\nstorage_engine = "rocket"\n')
    with pytest.raises(ConfigError, match=r"storage_engine must be one of fsspec, obstore"):
        load_profile()
