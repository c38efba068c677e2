"""`portable contract`: the shipped suites against a profile's providers or URLs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

EXE = shutil.which("portable", path=str(Path(sys.executable).parent)) or "portable"


def base(name):
    """A report's test name without its face (``test_x[async]`` -> ``test_x``)."""
    return name.split("[", 1)[0]


def run(*args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTABLE_")}
    return subprocess.run([EXE, "contract", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_storage_contract_on_a_file_bucket_passes_and_cleans_up(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "existing.txt").write_text("must survive")
    proc = run(f"storage=file://{data}", "--json", "r.json", "--junit-xml", "r.xml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "storage file://" in proc.stdout and ": OK" in proc.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    (provider,) = report["providers"]
    assert provider["ok"] and len(provider["passed"]) >= 120 and provider["failed"] == []
    # both faces ran every test: the sync Bucket and its portable.aio twin
    assert {d["test"] for d in provider["known_differences"]} == {
        "test_key_and_prefix_coexist[sync]", "test_key_and_prefix_coexist[async]"
    }
    assert {n["test"] for n in provider["not_supported"] if base(n["test"]) == "test_signed_urls_allow_get_and_put"} == {
        "test_signed_urls_allow_get_and_put[sync]", "test_signed_urls_allow_get_and_put[async]"
    }
    assert {p for p in provider["passed"] if base(p) == "test_put_then_get_returns_the_bytes"} == {
        "test_put_then_get_returns_the_bytes[sync]", "test_put_then_get_returns_the_bytes[async]"
    }
    assert "<testsuite" in (tmp_path / "r.xml").read_text()
    # the namespace is gone and existing data untouched
    assert sorted(p.name for p in data.iterdir()) == ["existing.txt"]
    assert (data / "existing.txt").read_text() == "must survive"


def test_a_broken_provider_exits_non_zero_and_names_the_failures(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the bucket folder should be")
    proc = run(f"storage=file://{blocker}", "-k", "put_then_get or create_only or list_is", cwd=tmp_path)
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout
    assert "test_put_then_get_returns_the_bytes" in proc.stdout


def test_an_ambiguous_bare_url_asks_for_the_domain(tmp_path):
    proc = run("mem://x", cwd=tmp_path)
    assert proc.returncode == 1
    assert "storage=mem://x" in proc.stderr


def test_fault_injection_at_100_percent_fails_both_domains_and_names_the_failures(tmp_path):
    proc = run(
        "storage=chaos+mem://broken?seed=1&error_rate=1.0",
        "messaging=chaos+mem://brokenq?seed=1&error_rate=1.0",
        "-k", "put_then_get or every_published_message",
        "--json", "r.json",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    failed = {p["domain"]: [base(f["test"]) for f in p["failed"]] for p in report["providers"]}
    assert "test_put_then_get_returns_the_bytes" in failed["storage"]
    assert "test_every_published_message_is_delivered_at_least_once" in failed["messaging"]
    assert "(injected)" in proc.stdout


def test_the_embedded_profile_passes_every_suite(tmp_path):
    proc = run("-k", "not signed_url", "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert [p["domain"] for p in report["providers"]] == ["storage", "messaging", "compute"]
    assert all(p["ok"] and not p["failed"] for p in report["providers"])


def test_face_async_runs_only_the_async_face(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = run(f"storage=file://{data}", "--face", "async", "-k", "put_then_get or list_is", "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (provider,) = json.loads((tmp_path / "r.json").read_text())["providers"]
    assert sorted(provider["passed"]) == [
        "test_list_is_in_lexical_order[async]", "test_put_then_get_returns_the_bytes[async]"
    ]


def test_an_unknown_face_is_refused(tmp_path):
    proc = run("storage=mem://x", "--face", "threads", cwd=tmp_path)
    assert proc.returncode != 0
    assert "--face" in proc.stderr and "threads" in proc.stderr
