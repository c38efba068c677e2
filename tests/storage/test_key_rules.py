"""Keys and bucket URLs that used to pass silently: line separators and C1 controls, and open_bucket("")."""

from __future__ import annotations

import pytest

from portable.driver.storage import check_key
from portable.errors import InvalidKey, InvalidURL
from portable.storage import open_bucket

REFUSED = ["\u0085", "\u2028", "\u2029", "\u0080", "\u009f", "\u009b", "\x7f", "\x00", "\n", "\x1e"]


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_a_key_with_a_control_or_line_separator_is_refused_naming_it(char):
    key = f"reports/a{char}b.json"
    with pytest.raises(InvalidKey, match=f"U\\+{ord(char):04X}"):
        check_key(key)
    bucket = open_bucket("chaos+mem://?error_rate=1&faults=unavailable")  # any request would fail Unavailable
    for call in (
        lambda: bucket.put(key, b"x"),
        lambda: bucket.get(key),
        lambda: bucket.head(key),
        lambda: bucket.open(key, "wb"),
        lambda: bucket.copy("ok", key),
        lambda: bucket.delete_many([key]),
        lambda: list(bucket.list(key)),
        lambda: bucket.abort_incomplete(0, prefix=key),
    ):
        with pytest.raises(InvalidKey, match=f"U\\+{ord(char):04X}"):
            call()


@pytest.mark.parametrize("char", ["\u00a0", "\u00a1", "\u200b", "\u3000", "\U0001f600", "\u00e9"])
def test_other_unicode_stays_valid(char):
    bucket = open_bucket("mem://")
    key = f"a{char}b"
    bucket.put(key, b"x")
    assert bucket.get(key) == b"x"
    assert [i.key for i in bucket.list("a")] == [key]


@pytest.mark.parametrize("url", ["", "   "])
def test_open_bucket_with_an_empty_url_is_an_error_naming_none(url):
    with pytest.raises(InvalidURL, match="pass None"):
        open_bucket(url)


def test_open_bucket_with_none_opens_the_profiles_bucket(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTABLE_STORAGE_URL", f"file://{tmp_path / 'p'}")
    bucket = open_bucket(None)
    bucket.put("k", b"x")
    assert (tmp_path / "p" / "k").read_bytes() == b"x"
