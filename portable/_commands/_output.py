"""What the storage commands print: JSON lines, summaries, warnings, and the progress bar.

* ``--json``: JSON Lines on stdout, one JSON object per line (one per entry,
  per object, and a last ``{"summary": ...}`` line for commands that move data).
* A summary line on stderr on success (``copied 12 objects, 3.4 MiB in 1.2 s; 3 skipped``),
  unless ``--quiet``.
* A progress bar (bytes, objects, rate, ETA; drawn by ``rich``, imported only
  here and only when it is drawn) when stderr is a terminal, unless ``--quiet``
  or ``--json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..driver.storage import ObjectInfo
from ..transfer import Progress, TransferReport

__all__ = ["Output", "TransferBar", "count_in_background", "human_size", "info_record", "summary_text"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(n: int) -> str:
    """``3565158`` as ``3.4 MiB`` (binary units; bytes below 1 KiB as ``512 B``)."""
    value = float(n)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _when(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def info_record(info: ObjectInfo, *, full: bool = False) -> dict[str, Any]:
    """``info`` as a JSON-ready dict: key, size, etag, modified (ISO 8601), and with ``full`` headers and metadata."""
    record: dict[str, Any] = {"key": info.key}
    if info.is_prefix:
        record["is_prefix"] = True
        return record
    record.update(size=info.size, etag=info.etag, modified=_when(info.modified))
    if full:
        record.update(
            content_type=info.content_type,
            cache_control=info.cache_control,
            content_encoding=info.content_encoding,
            content_disposition=info.content_disposition,
            metadata=dict(info.metadata),
        )
    return record


class Output:
    """The printing side of one command run, from its ``--json``, ``--quiet`` and ``--debug`` flags."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.json: bool = bool(getattr(args, "json", False))
        self.quiet: bool = bool(getattr(args, "quiet", False))
        self.debug: bool = bool(getattr(args, "debug", False))

    @property
    def bar_wanted(self) -> bool:
        """A progress bar is drawn only on a terminal, and never with --quiet or --json."""
        return not (self.quiet or self.json) and sys.stderr.isatty()

    def emit(self, record: dict[str, Any]) -> None:
        """One JSON Lines record on stdout."""
        sys.stdout.write(json.dumps(record, sort_keys=True, default=str) + "\n")

    def line(self, text: str) -> None:
        """A line of the command's normal output on stdout."""
        sys.stdout.write(text + "\n")

    def note(self, text: str) -> None:
        """A summary or note on stderr, unless --quiet."""
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        """A warning on stderr, even with --quiet (it is about data being lost)."""
        print(f"portable: warning: {text}", file=sys.stderr, flush=True)

    def summary(self, report: TransferReport, *, verb: str = "copied", extra: str = "") -> None:
        """The one-line summary of a transfer on stderr, or its JSON record with --json."""
        if self.json:
            self.emit({"summary": {
                "copied": report.copied, "skipped": report.skipped, "failed": report.failed,
                "deleted": report.deleted, "bytes": report.bytes_copied, "seconds": round(report.seconds, 3),
                "dry_run": report.dry_run,
            }})
            return
        self.note(summary_text(report, verb=verb, extra=extra))

    @contextmanager
    def transfer_bar(self, label: str, total_bytes: int | None = None) -> Iterator[TransferBar | None]:
        """A progress bar for a transfer when one is wanted (else None), closed on exit."""
        if not self.bar_wanted:
            yield None
            return
        try:
            bar = TransferBar(label, total_bytes)
        except ModuleNotFoundError as exc:
            if exc.name != "rich":
                raise
            self.note("portable: no progress bar: it needs rich (pip install 'rich>=13'; portable-cloud depends on it)")
            yield None
            return
        try:
            yield bar
        finally:
            bar.close()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_BASE_VERBS = {"copied": "copy", "moved": "move", "deleted": "delete"}


def summary_text(report: TransferReport, *, verb: str = "copied", extra: str = "") -> str:
    """``copied 12 objects, 3.4 MiB in 1.2 s; 3 skipped`` (and deleted/failed counts where not 0)."""
    size = human_size(report.bytes_copied)
    if report.dry_run:
        text = f"dry run: would {_BASE_VERBS.get(verb, verb)} {_plural(report.copied, 'object')}, {size}"
    else:
        text = f"{verb} {_plural(report.copied, 'object')}, {size} in {report.seconds:.1f} s"
    if report.skipped:
        text += f"; {report.skipped} skipped"
    if report.deleted:
        text += f"; {report.deleted} {'would be deleted' if report.dry_run else 'deleted'}"
    if extra:
        text += f"; {extra}"
    if report.failed:
        text += f"; {report.failed} FAILED"
    return text


class TransferBar:
    """A rich progress bar on stderr: bytes (done/total), objects, rate and ETA.

    Fed with portable.transfer's :class:`~portable.transfer.Progress` ticks
    (:meth:`tick`). The total is set later when it is counted in the background
    (:meth:`set_total`); objects the destination already holds, and the rest of
    an object that failed, are taken off the total, so rate and ETA are those of
    the bytes really copied.
    """

    def __init__(self, label: str, total_bytes: int | None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        self._lock = threading.Lock()
        self._moved: dict[str, int] = {}
        self._objects = 0
        self._objects_total: int | None = None
        self._left_out = 0  # bytes that will not be copied (skipped objects, the unsent rest of failures)
        self._total: int | None = total_bytes
        self._rich = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TextColumn("{task.fields[objects]}"),
            TransferSpeedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._rich.add_task(label, total=total_bytes, objects=self._objects_text())
        self._rich.start()
        self._closed = False

    def _objects_text(self) -> str:
        of = f"/{self._objects_total}" if self._objects_total is not None else ""
        return f"{self._objects}{of} objects"

    def _update(self, **kw: Any) -> None:
        total = None if self._total is None else max(self._total - self._left_out, 0)
        self._rich.update(self._task, total=total, objects=self._objects_text(), **kw)

    def set_total(self, objects: int, total_bytes: int) -> None:
        """The counted totals of the whole transfer."""
        with self._lock:
            self._objects_total = objects
            self._total = total_bytes
            self._update()

    def advance(self, n: int) -> None:
        """``n`` more bytes copied (a single-object copy)."""
        with self._lock:
            self._update(advance=n)

    def tick(self, progress: Progress) -> None:
        """Take one tick of a transfer's progress callback."""
        with self._lock:
            result = progress.result
            if result is None:
                self._moved[progress.key] = self._moved.get(progress.key, 0) + progress.bytes_delta
                self._update(advance=progress.bytes_delta)
                return
            moved = self._moved.pop(progress.key, 0)
            if result.status != "deleted":
                self._objects += 1
                self._left_out += max(result.size - moved, 0)
            self._update()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._rich.stop()


def count_in_background(counter: Callable[[], tuple[int, int]], bar: TransferBar | None) -> None:
    """Run ``counter`` (objects, bytes) in a daemon thread and give its answer to ``bar``; nothing without a bar.

    A failure to count only leaves the bar without a total (the transfer itself reports errors).
    """
    if bar is None:
        return

    def run() -> None:
        try:
            objects, total = counter()
        except Exception:
            return
        bar.set_total(objects, total)

    threading.Thread(target=run, name="portable-count", daemon=True).start()

