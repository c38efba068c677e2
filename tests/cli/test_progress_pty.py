"""The progress bar, drawn on a pseudo-terminal: bytes, objects, rate and ETA, then the summary line.

stderr is the pty's secondary side (so `portable` sees a terminal there), stdout
a pipe; what the bar drew is read from the primary side.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import threading

from tests.cli.conftest import EXE, clean_env

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _read_all(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the last writer closed the secondary side
            return
        if not chunk:
            return
        into.append(chunk)


def _on_a_terminal(tmp_path, args, extra_env=None):
    """Run `portable ARGS` with stderr on a pty; return (exit code, stdout, what the terminal showed)."""
    primary, secondary = pty.openpty()
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(primary, chunks), daemon=True)
    reader.start()
    env = clean_env(tmp_path, {"COLUMNS": "160", "LINES": "40", "TERM": "xterm-256color", **(extra_env or {})})
    try:
        proc = subprocess.run([EXE, *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=secondary, timeout=120)
    finally:
        os.close(secondary)
    reader.join(timeout=30)
    os.close(primary)
    return proc.returncode, proc.stdout, _ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def test_cp_r_on_a_terminal_draws_a_rich_bar_with_rate_and_eta_then_a_summary(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(24):
        (src / f"part-{i:02d}.bin").write_bytes(os.urandom(512 * 1024))
    code, stdout, screen = _on_a_terminal(tmp_path, ["cp", "-r", "./src", "./dst"])
    assert code == 0, screen
    assert stdout == b""  # the bar and the summary go to stderr only
    assert "copy " in screen and "24/24 objects" in screen, screen
    assert re.search(r"12\.0(/12\.0)? MiB", screen), screen  # bytes done (of the total)
    assert re.search(r"\d+(\.\d+)? [kMG]?B/s", screen), screen  # the rate
    assert re.search(r"ETA \d+:\d\d:\d\d", screen), screen  # the time remaining
    assert re.search(r"copied 24 objects, 12\.0 MiB in \d+\.\d s", screen), screen
    assert len(list((tmp_path / "dst").iterdir())) == 24


def test_the_same_copy_piped_prints_only_the_summary(run, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "one.bin").write_bytes(b"x" * 1000)
    res = run("cp", "-r", "./src", "./dst")
    assert res.code == 0 and res.out == ""
    assert res.err == "copied 1 object, 1000 B in " + res.err.split(" in ", 1)[1]
    assert "ETA" not in res.err and "\r" not in res.err and "\x1b" not in res.err


def test_without_rich_the_copy_says_why_there_is_no_bar_and_still_succeeds(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "rich.py").write_text('raise ModuleNotFoundError("No module named \'rich\'", name="rich")\n')
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "one.bin").write_bytes(b"y" * 2048)
    env = {"PYTHONPATH": f"{shadow}:{clean_env(tmp_path)['PYTHONPATH']}"}
    code, _stdout, screen = _on_a_terminal(tmp_path, ["cp", "-r", "./src", "./dst"], env)
    assert code == 0, screen
    assert "no progress bar: it needs rich (pip install 'rich>=13'; portable-cloud depends on it)" in screen
    assert "copied 1 object, 2.0 KiB in " in screen
