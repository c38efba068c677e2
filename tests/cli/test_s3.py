"""`portable` with s3:// URLs on moto, both engines, through the installed entry point; and S3 without credentials."""

from __future__ import annotations

import pytest

from tests.cli._flow import one_line, storage_commands_flow


@pytest.mark.parametrize("place_name", ["s3_obstore", "s3_fsspec"])
def test_the_storage_commands_take_s3_urls(run, tmp_path, request, place_name):
    storage_commands_flow(run, tmp_path, request.getfixturevalue(place_name))


@pytest.mark.parametrize("place_name", ["s3_obstore", "s3_fsspec"])
def test_s3_without_credentials_is_one_line_naming_the_fix(run, request, place_name):
    place = request.getfixturevalue(place_name)
    res = run("ls", place.url(""))  # no AWS_* variables, no ~/.aws; metadata services on a closed loopback port
    err = one_line(res)
    assert "s3:// found no credentials" in err
    assert "AWS_ACCESS_KEY_ID" in err and "AWS_PROFILE" in err and "?endpoint_url=" in err
    debug = run("--debug", "ls", place.url(""))
    assert debug.code == 1 and "Traceback" in debug.err and debug.err.count("\n") > 3
