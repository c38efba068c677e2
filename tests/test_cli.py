"""The `portable` command, run through its installed entry point."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXE = shutil.which("portable", path=str(Path(sys.executable).parent)) or "portable"


def run(*args, cwd, env_extra=None, stdin=None, check=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTABLE_")}
    env.update(env_extra or {})
    proc = subprocess.run(
        [EXE, *args], cwd=cwd, env=env, input=stdin, capture_output=True, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"portable {' '.join(args)} -> {proc.returncode}\n{proc.stderr.decode()}")
    return proc


@pytest.fixture
def work(tmp_path):
    return tmp_path


def test_put_cat_ls_rm_on_a_file_bucket(work):
    bucket = f"file://{work / 'b'}"
    src = work / "in.txt"
    src.write_bytes(b"hello cli")
    run("put", "--bucket", bucket, "docs/in.txt", str(src), cwd=work)
    assert run("cat", "--bucket", bucket, "docs/in.txt", cwd=work).stdout == b"hello cli"
    run("put", "--bucket", bucket, "docs/stdin.txt", "-", cwd=work, stdin=b"from stdin")
    listing = run("ls", "--bucket", bucket, "-r", cwd=work).stdout.decode()
    assert "docs/in.txt" in listing and "docs/stdin.txt" in listing
    top = run("ls", "--bucket", bucket, cwd=work).stdout.decode()
    assert "PRE" in top and "docs/" in top
    run("rm", "--bucket", bucket, "docs/in.txt", cwd=work)
    assert "docs/in.txt" not in run("ls", "--bucket", bucket, "-r", cwd=work).stdout.decode()


def test_put_if_none_match_refuses_an_existing_key(work):
    bucket = f"file://{work / 'b'}"
    run("put", "--bucket", bucket, "k", "-", cwd=work, stdin=b"1")
    proc = run("put", "--bucket", bucket, "--if-none-match", "k", "-", cwd=work, stdin=b"2", check=False)
    assert proc.returncode == 1
    assert b"AlreadyExists" in proc.stderr
    assert run("cat", "--bucket", bucket, "k", cwd=work).stdout == b"1"


def test_cp_streams_between_two_providers(work):
    a, b = f"file://{work / 'a'}", f"file://{work / 'b'}"
    data = os.urandom(3 * 1024 * 1024 + 17)
    run("put", "--bucket", a, "big.bin", "-", cwd=work, stdin=data)
    run("cp", f"{a}::big.bin", f"{b}::copy/big.bin", cwd=work)
    assert run("cat", "--bucket", b, "copy/big.bin", cwd=work).stdout == data
    run("cp", "--bucket", a, "big.bin", "same-bucket.bin", cwd=work)
    assert (work / "a" / "same-bucket.bin").read_bytes() == data


def test_missing_key_exits_1_with_a_typed_message(work):
    proc = run("cat", "--bucket", f"file://{work}", "nope", cwd=work, check=False)
    assert proc.returncode == 1
    assert proc.stderr.decode().startswith("portable: NotFound:")


def test_bad_url_exits_1_naming_the_fix(work):
    proc = run("ls", "--bucket", "s4://x", cwd=work, check=False)
    assert proc.returncode == 1
    assert b"Did you mean s3://" in proc.stderr


def test_config_show_masks_secrets(work):
    (work / "portable.toml").write_text(
        '[profiles.default]\nstorage = "az://c?account=a&sas_token=TOPSECRET"\n'
    )
    out = run("config", "show", cwd=work).stdout.decode()
    data = json.loads(out)
    assert data["storage"].startswith("az://c?account=a&sas_token=")
    assert "TOPSECRET" not in out


def test_doctor_opens_each_provider_and_prints_capabilities(work):
    (work / "portable.toml").write_text(f'[profiles.default]\nstorage = "file://{work / "objs"}"\n')
    out = run("doctor", cwd=work).stdout.decode()
    assert "storage" in out and "conditional_create" in out


def test_doctor_fails_on_a_broken_provider(work):
    (work / "portable.toml").write_text('[profiles.default]\nstorage = "nosuch://x"\n')
    proc = run("doctor", cwd=work, check=False)
    assert proc.returncode == 1
    assert b"FAILED" in proc.stdout


def test_demo_runs_with_no_configuration(work):
    proc = run("demo", "--dir", str(work / "demo"), cwd=work)
    out = proc.stdout.decode()
    assert "job succeeded (exit code 0)" in out
    assert "10 orders, total amount 545 (expected 545" in out
    # every order's effect happened exactly once
    processed = sorted(p.name for p in (work / "demo" / "objects" / "processed").iterdir() if not p.name.startswith("."))
    assert processed == [f"order-{i:03d}.json" for i in range(1, 11)]


def test_python_dash_m_portable_works_from_the_repo_without_install(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTABLE_")}
    env["PYTHONPATH"] = str(repo)
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "portable", "demo", "--dir", str(tmp_path / "d")],
        cwd=tmp_path, env=env, capture_output=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"total amount 545 (expected 545" in proc.stdout


def _old_leftover(folder, name=".portable-tmp-abcd1234-x.json"):
    folder.mkdir(parents=True, exist_ok=True)
    left = folder / name
    left.write_bytes(b"half")
    then = time.time() - 7200
    os.utime(left, (then, then))
    return left


def test_abort_incomplete_dry_run_lists_and_keeps_then_removes(work):
    bucket = f"file://{work / 'b'}"
    left = _old_leftover(work / "b" / "d")
    young = _old_leftover(work / "b" / "e", ".portable-tmp-0000ffff-y")
    os.utime(young, None)
    run("put", "--bucket", bucket, "d/kept", "-", cwd=work, stdin=b"committed")
    proc = run("abort-incomplete", bucket, "--older-than", "1h", "--dry-run", cwd=work)
    assert proc.stdout.decode().splitlines() == [f"d/x.json#{left.name}"]
    assert b"would remove 1 leftover(s)" in proc.stderr
    assert left.exists()
    proc = run("abort-incomplete", bucket, "--older-than", "30m", "--prefix", "d/", cwd=work)
    assert proc.stdout.decode().splitlines() == [f"d/x.json#{left.name}"]
    assert not left.exists() and young.exists()
    assert run("cat", "--bucket", bucket, "d/kept", cwd=work).stdout == b"committed"
    proc = run("abort-incomplete", bucket, "--older-than", "3600", cwd=work)
    assert proc.stdout == b"" and b"removed 0 leftover(s)" in proc.stderr


def test_abort_incomplete_uses_the_profiles_bucket(work):
    (work / "portable.toml").write_text(f'[profiles.default]\nstorage = "file://{work / "objs"}"\n')
    left = _old_leftover(work / "objs")
    proc = run("abort-incomplete", "--older-than", "1h", cwd=work)
    assert proc.stdout.decode().splitlines() == [f"x.json#{left.name}"]


@pytest.mark.parametrize("age", ["1x", "-5", "h1", "inf", ""])
def test_abort_incomplete_bad_age_exits_2(work, age):
    proc = run("abort-incomplete", f"file://{work}", "--older-than", age, cwd=work, check=False)
    assert proc.returncode == 2
    assert b"--older-than" in proc.stderr


def test_abort_incomplete_needs_an_age(work):
    proc = run("abort-incomplete", f"file://{work}", cwd=work, check=False)
    assert proc.returncode == 2


def test_an_empty_bucket_url_exits_1_saying_pass_none(work):
    proc = run("abort-incomplete", "", "--older-than", "1h", cwd=work, check=False)
    assert proc.returncode == 1
    assert b"InvalidURL" in proc.stderr and b"pass None" in proc.stderr
    proc = run("ls", "--bucket", "", cwd=work, check=False)
    assert proc.returncode == 1 and b"InvalidURL" in proc.stderr
