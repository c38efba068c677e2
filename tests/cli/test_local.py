"""`portable` storage commands on local paths, file:// and mem:// URLs, through the installed entry point.

Each test is one of the things a new user met (issue 19): URLs read as keys, `cp`
printing nothing, `mem://` keeping nothing silently, `put KEY` reading a terminal,
a missing file as a traceback; and the rules of the command line: exit codes,
--include/--exclude order, --json lines, --dry-run.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.cli.conftest import EXE, clean_env, make_tree


def test_ls_of_a_file_url_lists_it_and_a_bare_word_is_a_key_on_the_bucket(run, tmp_path):
    make_tree(tmp_path / "data")
    top = run("ls", f"file://{tmp_path / 'data'}")
    assert top.code == 0, top.err
    assert "a.txt" in top.out and "PRE" in top.out and "sub/" in top.out
    assert "sub/c.txt" not in top.out
    deep = run("ls", "-r", "./data")
    assert {line.split()[-1] for line in deep.lines()} == {"a.txt", "b.log", "sub/c.txt", "sub/deep/d.log", "sub/e.csv"}
    keyed = run("ls", "--bucket", f"file://{tmp_path / 'data'}", "sub/")
    assert "sub/c.txt" in keyed.out and "PRE" in keyed.out and "sub/deep/" in keyed.out


def test_cp_copies_a_file_and_says_so(run, tmp_path):
    (tmp_path / "in.txt").write_bytes(b"hello cli")
    res = run("cp", "./in.txt", "./out/")
    assert res.code == 0, res.err
    assert (tmp_path / "out" / "in.txt").read_bytes() == b"hello cli"
    assert res.err.strip().splitlines()[-1].startswith("copied 1 object, 9 B in ")
    res = run("cp", "./in.txt", "./out/renamed.txt", "--quiet")
    assert res.code == 0 and res.err == "" and res.out == ""
    assert (tmp_path / "out" / "renamed.txt").read_bytes() == b"hello cli"
    assert run("cat", "./out/renamed.txt").raw == b"hello cli"


def test_cp_r_and_sync_copy_a_tree_then_skip_what_is_there(run, tmp_path):
    files = make_tree(tmp_path / "src")
    res = run("cp", "-r", "./src", f"file://{tmp_path / 'dst'}")
    assert res.code == 0, res.err
    assert res.err.strip().splitlines()[-1].startswith("copied 5 objects, ")
    for key, data in files.items():
        assert (tmp_path / "dst" / key).read_bytes() == data
    again = run("sync", "./src", "./dst")
    assert again.code == 0, again.err
    assert "synced 0 objects" in again.err and "5 skipped" in again.err


def test_sync_delete_removes_what_only_the_destination_has_and_dry_run_changes_nothing(run, tmp_path):
    make_tree(tmp_path / "src")
    assert run("sync", "./src", "./dst").code == 0
    (tmp_path / "dst" / "extra.txt").write_bytes(b"only here")
    plan = run("sync", "./src", "./dst", "--delete", "--dry-run")
    assert plan.code == 0, plan.err
    assert "would delete: extra.txt" in plan.out
    assert (tmp_path / "dst" / "extra.txt").exists()
    done = run("sync", "./src", "./dst", "--delete")
    assert done.code == 0 and "1 deleted" in done.err
    assert not (tmp_path / "dst" / "extra.txt").exists()


def test_include_exclude_apply_in_order_and_the_last_match_wins(run, tmp_path):
    make_tree(tmp_path / "src")
    res = run("cp", "-r", "./src", "./only-logs", "--exclude", "*", "--include", "*.log")
    assert res.code == 0, res.err
    got = sorted(str(p.relative_to(tmp_path / "only-logs")) for p in (tmp_path / "only-logs").rglob("*") if p.is_file())
    assert got == ["b.log", "sub/deep/d.log"]
    res = run("cp", "-r", "./src", "./no-sub", "--exclude", "sub/*", "--include", "sub/e.csv")
    got = sorted(str(p.relative_to(tmp_path / "no-sub")) for p in (tmp_path / "no-sub").rglob("*") if p.is_file())
    assert got == ["a.txt", "b.log", "sub/e.csv"]
    # the same filters, the other order: --exclude sub/* is the last match for sub/e.csv
    res = run("cp", "-r", "./src", "./no-sub2", "--include", "sub/e.csv", "--exclude", "sub/*")
    got = sorted(str(p.relative_to(tmp_path / "no-sub2")) for p in (tmp_path / "no-sub2").rglob("*") if p.is_file())
    assert got == ["a.txt", "b.log"]
    du = run("du", "./src", "--exclude", "*.log", "--json")
    assert du.json_lines() == [{"url": str(tmp_path / "src"), "objects": 3, "bytes": 6 + 800 + 8}]


def test_json_output_is_json_lines_with_a_summary_last(run, tmp_path):
    make_tree(tmp_path / "src")
    res = run("cp", "-r", "./src", "./dst", "--json")
    assert res.code == 0, res.err
    records = res.json_lines()
    assert records[-1]["summary"]["copied"] == 5 and records[-1]["summary"]["failed"] == 0
    assert sorted(r["key"] for r in records[:-1]) == ["a.txt", "b.log", "sub/c.txt", "sub/deep/d.log", "sub/e.csv"]
    assert {r["status"] for r in records[:-1]} == {"copied"}
    listing = run("ls", "-r", "./dst", "--json").json_lines()
    assert {r["key"]: r["size"] for r in listing}["sub/deep/d.log"] == 70_000
    stat = run("stat", "./dst/sub/c.txt", "--json").json_lines()
    assert len(stat) == 1 and stat[0]["size"] == 800 and stat[0]["metadata"] == {}


def test_mv_copies_verified_then_deletes_the_source(run, tmp_path):
    make_tree(tmp_path / "src")
    one = run("mv", "./src/a.txt", "./moved/")
    assert one.code == 0, one.err
    assert (tmp_path / "moved" / "a.txt").read_bytes() == b"alpha\n" and not (tmp_path / "src" / "a.txt").exists()
    tree = run("mv", "-r", "./src/sub", "./moved/sub")
    assert tree.code == 0, tree.err
    assert (tmp_path / "moved" / "sub" / "deep" / "d.log").stat().st_size == 70_000
    assert run("ls", "-r", "./src/sub").out == ""
    assert "3 source objects deleted" in tree.err


def test_rm_and_rm_r_with_dry_run(run, tmp_path):
    make_tree(tmp_path / "b")
    plan = run("rm", "-r", "./b/sub", "--dry-run")
    assert plan.code == 0 and sorted(plan.lines()) == [
        "would delete: c.txt", "would delete: deep/d.log", "would delete: e.csv"]
    assert (tmp_path / "b" / "sub" / "c.txt").exists()
    assert run("rm", "-r", "./b/sub", "--exclude", "*", "--include", "*.csv").code == 0
    assert not (tmp_path / "b" / "sub" / "e.csv").exists()
    assert (tmp_path / "b" / "sub" / "deep" / "d.log").exists() and (tmp_path / "b" / "sub" / "c.txt").exists()
    assert run("rm", "./b/a.txt").code == 0 and not (tmp_path / "b" / "a.txt").exists()
    refused = run("rm", "./b/sub/")
    assert refused.code == 2 and "add -r" in refused.err


def test_cp_to_mem_warns_that_it_ends_with_the_process(run, tmp_path):
    make_tree(tmp_path / "src")
    res = run("cp", "-r", "./src", "mem://scratch/")
    assert res.code == 0, res.err
    assert "warning: mem:// keeps objects in this process's memory only" in res.err
    assert "copied 5 objects" in res.err
    put = run("put", "mem://scratch/k", "-", stdin=b"x")
    assert put.code == 0 and "warning: mem://" in put.err


def test_a_missing_source_file_is_one_line_and_exit_1(run):
    for args in (("cp", "./nope.txt", "./x"), ("cp", "-r", "./nope", "./x"), ("put", "file://./k", "./nope.txt"),
                 ("cat", "./nope.txt"), ("stat", "./nope.txt"), ("ls", "./nope/"), ("du", "./nope"),
                 ("sync", "./nope", "./x")):
        res = run(*args)
        assert res.code == 1, (args, res.err)
        assert res.err.count("\n") == 1 and res.err.startswith("portable: NotFound: ") and "Traceback" not in res.err
        assert "nope" in res.err


def test_put_without_a_file_refuses_a_terminal_stdin_and_reads_a_pipe(run, tmp_path):
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run([EXE, "put", "./obj"], cwd=tmp_path, env=clean_env(tmp_path), stdin=secondary,
                              capture_output=True, timeout=60)
    finally:
        os.close(secondary)
        os.close(primary)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "stdin is a terminal" in err and "portable put URL -" in err
    assert not (tmp_path / "obj").exists()
    piped = run("put", "./obj", stdin=b"from a pipe")
    assert piped.code == 0 and (tmp_path / "obj").read_bytes() == b"from a pipe"


def test_bad_usage_exits_2_and_help_documents_the_exit_codes(run, tmp_path):
    (tmp_path / "x").write_bytes(b"x")
    assert run("cp", "only-one-arg").code == 2
    assert run("ls", "--no-such-option").code == 2
    assert run("cp", "-r", "./x", "./b", "--checksum", "--size-only").code == 2
    filtered = run("cp", "./x", "./y", "--exclude", "*")
    assert filtered.code == 2 and "add -r" in filtered.err
    assert run("cp", "./x", "./x").code == 2
    helped = run("--help")
    assert helped.code == 0
    assert "exit codes:" in helped.out and "2  bad usage" in helped.out and "1  a portable error" in helped.out


def test_a_portable_error_has_no_traceback_unless_debug(run, tmp_path):
    res = run("cat", "--bucket", f"file://{tmp_path}", "nope")
    assert res.code == 1 and res.err.startswith("portable: NotFound:") and "Traceback" not in res.err
    dbg = run("--debug", "cat", "--bucket", f"file://{tmp_path}", "nope")
    assert dbg.code == 1 and "Traceback" in dbg.err
    unknown = run("ls", "s4://bucket/x")
    assert unknown.code == 1 and "Did you mean s3://" in unknown.err


def test_rich_is_imported_only_to_draw_a_bar(tmp_path):
    code = "import sys, portable, portable.cli, portable.transfer; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(tmp_path), capture_output=True, timeout=60)
    assert out.stdout.strip() == b"False", out.stderr


def test_bare_keys_land_on_the_profiles_bucket_also_as_tree_prefixes(run, tmp_path):
    (tmp_path / "portable.toml").write_text(f'[profiles.default]\nstorage = "file://{tmp_path / "objs"}"\n')
    files = make_tree(tmp_path / "src")
    res = run("cp", "-r", "./src", "backup/2026")
    assert res.code == 0, res.err
    assert (tmp_path / "objs" / "backup" / "2026" / "sub" / "e.csv").read_bytes() == files["sub/e.csv"]
    assert "backup/2026/a.txt" in run("ls", "-r", "backup/").out
    assert run("du", "backup", "--json").json_lines()[0]["objects"] == 5
    assert run("cat", "backup/2026/a.txt").raw == files["a.txt"]


def test_a_failed_object_is_one_line_the_others_go_on_and_the_exit_code_is_1(run, tmp_path):
    make_tree(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "sub").write_bytes(b"a file where the folder sub/ must go")
    res = run("cp", "-r", "./src", "./dst")
    assert res.code == 1
    failed = sorted(line.split()[2].rstrip(":") for line in res.err.splitlines() if line.startswith("portable: failed "))
    assert failed == ["sub/c.txt", "sub/deep/d.log", "sub/e.csv"]
    assert res.err.strip().splitlines()[-1].startswith("copied 2 objects, 16 B in ") and "; 3 FAILED" in res.err
    assert (tmp_path / "dst" / "a.txt").read_bytes() == b"alpha\n"
    as_json = run("cp", "-r", "./src", "./dst", "--json")
    assert as_json.code == 1 and as_json.json_lines()[-1]["summary"]["failed"] == 3


def test_checksum_finds_a_same_size_difference_that_size_and_time_miss(run, tmp_path):
    make_tree(tmp_path / "src")
    assert run("sync", "./src", "./dst").code == 0
    (tmp_path / "dst" / "a.txt").write_bytes(b"ALPHA\n")  # same size, newer than the source
    quick = run("sync", "./src", "./dst", "--json").json_lines()
    assert quick[-1]["summary"]["copied"] == 0
    full = run("sync", "./src", "./dst", "--checksum", "--json").json_lines()
    assert [r["key"] for r in full[:-1] if r["status"] == "copied"] == ["a.txt"]
    assert (tmp_path / "dst" / "a.txt").read_bytes() == b"alpha\n"
