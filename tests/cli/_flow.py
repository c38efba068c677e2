"""The flow the provider tests run on each emulator's bucket, and the check of a one-line error."""

from __future__ import annotations

import uuid

from tests.cli.conftest import make_tree


def storage_commands_flow(run, tmp_path, place):
    """cp -r, ls, ls -r --json, cat, put, stat --json, sync (all skipped), cp -r back with filters, du, mv, rm -r."""
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
    assert go("cat", place.url(f"{p}/sub/c.txt")).raw == files["sub/c.txt"]  # no "empty segment"
    go("put", place.url(f"{p}/typed.json"), "-", "--content-type", "application/json", stdin=b'{"a": 1}')
    stat = go("stat", place.url(f"{p}/typed.json"), "--json").json_lines()
    assert stat[0]["size"] == 8 and stat[0]["content_type"] == "application/json"
    again = go("sync", "./src", place.url(p))
    assert "synced 0 objects" in again.err and "5 skipped" in again.err
    back = go("cp", "-r", place.url(p), "./back", "--exclude", "*", "--include", "*.log", "--json").json_lines()
    assert sorted(r["key"] for r in back[:-1]) == ["b.log", "sub/deep/d.log"]
    assert (tmp_path / "back" / "sub" / "deep" / "d.log").read_bytes() == files["sub/deep/d.log"]
    go("mv", place.url(f"{p}/a.txt"), place.url(f"{p}/moved/a.txt"))
    listed = go("ls", "-r", place.url(f"{p}/"), "--json").json_lines()
    expected = {f"{p}/{k}": len(v) for k, v in files.items() if k != "a.txt"}
    expected.update({f"{p}/moved/a.txt": len(files["a.txt"]), f"{p}/typed.json": 8})
    assert {r["key"]: r["size"] for r in listed} == expected
    go("rm", "-r", place.url(f"{p}/"))
    assert go("du", place.url(p), "--json").json_lines() == [{"url": place.url(p), "objects": 0, "bytes": 0}]


def one_line(res) -> str:
    """The stderr of a run that failed with exit 1 in exactly one line, no traceback and no native dump."""
    assert res.code == 1, res.err
    assert res.err.count("\n") == 1 and "Traceback" not in res.err and "Debug source" not in res.err, res.err
    return res.err
