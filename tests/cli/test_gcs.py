"""`portable` with gs:// URLs on fake-gcs-server, through the installed entry point; and GCS without credentials."""

from __future__ import annotations

from tests.cli._flow import one_line, storage_commands_flow


def test_the_storage_commands_take_gs_urls(run, tmp_path, gs_place):
    storage_commands_flow(run, tmp_path, gs_place)


def test_gcs_without_credentials_is_one_line_naming_the_fix(run, gs_place, tmp_path):
    url = gs_place.url("").replace("engine=fsspec", "engine=fsspec&token=google_default")
    env = {**gs_place.env, "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-such-key.json")}
    err = one_line(run("ls", url, env=env))
    assert "gs:// found no credentials" in err
    assert "GOOGLE_APPLICATION_CREDENTIALS" in err and "gcloud auth application-default login" in err
