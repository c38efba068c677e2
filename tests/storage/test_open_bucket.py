"""open_bucket: which resilience policy a bucket's calls run under, and the names portable.storage keeps."""

import pytest

import portable.driver.storage
import portable.storage
from portable import Unavailable
from portable.config import Profile
from portable.resilience import ResiliencePolicy, RetryPolicy
from portable.storage import open_bucket
from portable.testing.chaos import chaos_of

ALWAYS_UNAVAILABLE = "chaos+mem://?error_rate=1&faults=unavailable"


def policy_of(attempts: int) -> ResiliencePolicy:
    return ResiliencePolicy(retry=RetryPolicy(max_attempts=attempts, initial_backoff=0, max_backoff=0), breaker=None)


def profile_with(attempts: int) -> Profile:
    return Profile(name="t", storage=ALWAYS_UNAVAILABLE, queue="mem://", jobs="local://", resilience=policy_of(attempts))


def attempts_of_one_get(bucket: portable.storage.Bucket) -> int:
    with pytest.raises(Unavailable):
        bucket.get("k")
    return chaos_of(bucket).stats.calls["get"]


def test_without_a_policy_the_profiles_policy_applies():
    assert attempts_of_one_get(open_bucket(profile=profile_with(3))) == 3


def test_a_policy_overrides_the_profiles():
    assert attempts_of_one_get(open_bucket(profile=profile_with(3), policy=policy_of(1))) == 1
    assert attempts_of_one_get(open_bucket(profile=profile_with(1), policy=policy_of(2))) == 2


def test_a_policy_overrides_the_profiles_with_an_explicit_url_too():
    bucket = open_bucket(ALWAYS_UNAVAILABLE, profile=profile_with(3), policy=policy_of(2))
    assert attempts_of_one_get(bucket) == 2


def test_the_names_imported_from_portable_storage_before_the_package_split_still_are():
    assert portable.storage.check_key is portable.driver.storage.check_key
    assert "check_key" not in portable.storage.__all__
    for name in ("open_driver", "DEFAULT_PART_SIZE", "StorageDriver", "WriteOptions", "WriteStream"):
        assert hasattr(portable.storage, name), name
