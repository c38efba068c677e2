"""`portable` with URL arguments on every provider's emulator: moto (s3://, both engines), Azurite (az://),
fake-gcs-server (gs://), through the installed entry point; and the credentials error of each, in one line.
"""

from __future__ import annotations

import uuid

import pytest

from tests.cli.conftest import make_tree

PLACES = ["s3_obstore", "s3_fsspec", "az_place", "gs_place"]


@pytest.mark.parametrize("place_name", PLACES)
def test_the_storage_commands_take_urls_on_each_provider(run, tmp_path, request, place_name):
    place = request.getfixturevalue(place_name)
    files = make_tree(tmp_path / "src")
    p = f"t{uuid.uuid4().hex[:8]}"

    def go(*args: str, stdin: bytes | None = None):
        res = run(*args, env=place.env, stdin=stdin)
        assert res.code == 0, f"portable {' '.join(args)} -> {res.code}\n{res.err}"
        return res

    up = go("cp", "-r", "./src", place.url(f"{p}/"))
    assert up.err.strip().splitlines()[-1].startswith("copied 5 objects, 69.2 KiB in ")
    top = go("ls", place.url(""))  # `ls s3://bucket` lists the bucket, it is not a key
    assert f"PRE  {p}/" in top.out
    listed = go("ls", "-r", place.url(f"{p}/"), "--json").json_lines()
    assert {r["key"]: r["size"] for r in listed} == {f"{p}/{k}": len(v) for k, v in files.items()}
    assert go("cat", place.url(f"{p}/sub/c.txt")).raw == files["sub/c.txt"]  # no "empty segment"
    go("put", place.url(f"{p}/typed.json"), "-", "--content-type", "application/json", stdin=b'{"a": 1}')
    stat = go("stat", place.url(f"{p}/typed.json"), "--json").json_lines()
    assert stat[0]["size"] == 8 and stat[0]["content_type"] == "application/json"
    again = go("sync", "./src", place.url(p))
    assert "synced 0 objects" in again.err and "5 skipped" in again.err
    back = go("cp", "-r", place.url(p), "./back", "--exclude", "*", "--include", "*.log", "--json").json_lines()
    assert sorted(r["key"] for r in back[:-1]) == ["b.log", "sub/deep/d.log"]
    assert (tmp_path / "back" / "sub" / "deep" / "d.log").read_bytes() == files["sub/deep/d.log"]
    du = go("du", place.url(p), "--json").json_lines()
    assert du[0]["objects"] == 6 and du[0]["bytes"] == sum(map(len, files.values())) + 8
    go("mv", place.url(f"{p}/a.txt"), place.url(f"{p}/moved/a.txt"))
    gone = run("stat", place.url(f"{p}/a.txt"), env=place.env)
    assert gone.code == 1 and gone.err.startswith("portable: NotFound:") and gone.err.count("\n") == 1
    go("rm", "-r", place.url(f"{p}/"))
    assert go("ls", "-r", place.url(f"{p}/")).out == ""


def _one_line(res) -> str:
    assert res.code == 1, res.err
    assert res.err.count("\n") == 1 and "Traceback" not in res.err and "Debug source" not in res.err, res.err
    return res.err


@pytest.mark.parametrize("place_name", ["s3_obstore", "s3_fsspec"])
def test_s3_without_credentials_is_one_line_naming_the_fix(run, request, place_name):
    place = request.getfixturevalue(place_name)
    res = run("ls", place.url(""))  # no AWS_* variables, no ~/.aws; metadata services on a closed loopback port
    err = _one_line(res)
    assert "s3:// found no credentials" in err
    assert "AWS_ACCESS_KEY_ID" in err and "AWS_PROFILE" in err and "?endpoint_url=" in err
    debug = run("--debug", "ls", place.url(""))
    assert debug.code == 1 and "Traceback" in debug.err and debug.err.count("\n") > 3


def test_azure_with_a_wrong_key_is_one_line_naming_the_fix(run, az_place):
    conn = next(iter(az_place.env.values()))
    secret = conn.split("AccountKey=", 1)[1].split(";", 1)[0]
    wrong = conn.replace(secret, "d3Jvbmdrd3Jvbmdrd3Jvbmdrd3Jvbmdrd3Jvbmdr")
    res = run("ls", az_place.url(""), env={k: wrong for k in az_place.env})
    err = _one_line(res)
    assert "az:// refused the credentials" in err and "AZURE_STORAGE_CONNECTION_STRING" in err and "az login" in err
    assert secret not in err and "d3Jvbmdr" not in err


def test_gcs_without_credentials_is_one_line_naming_the_fix(run, gs_place, tmp_path):
    url = gs_place.url("").replace("engine=fsspec", "engine=fsspec&token=google_default")
    env = {**gs_place.env, "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-such-key.json")}
    err = _one_line(run("ls", url, env=env))
    assert "gs:// found no credentials" in err
    assert "GOOGLE_APPLICATION_CREDENTIALS" in err and "gcloud auth application-default login" in err
