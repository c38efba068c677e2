"""`portable` with az:// URLs on Azurite (the default engine), through the installed entry point; and a wrong key."""

from __future__ import annotations

from tests.cli._flow import one_line, storage_commands_flow


def test_the_storage_commands_take_az_urls(run, tmp_path, az_place):
    storage_commands_flow(run, tmp_path, az_place)


def test_azure_with_a_wrong_key_is_one_line_naming_the_fix(run, az_place):
    conn = next(iter(az_place.env.values()))
    secret = conn.split("AccountKey=", 1)[1].split(";", 1)[0]
    wrong = conn.replace(secret, "d3Jvbmdrd3Jvbmdrd3Jvbmdrd3Jvbmdrd3Jvbmdr")
    res = run("ls", az_place.url(""), env={k: wrong for k in az_place.env})
    err = one_line(res)
    assert "az:// refused the credentials" in err and "AZURE_STORAGE_CONNECTION_STRING" in err and "az login" in err
    assert secret not in err and "d3Jvbmdr" not in err
    debug = run("--debug", "ls", az_place.url(""), env={k: wrong for k in az_place.env})
    assert debug.code == 1 and "Traceback" in debug.err and "AuthorizationFailure" in debug.err
    assert secret not in debug.err and "d3Jvbmdr" not in debug.err  # the provider's detail, no secret
