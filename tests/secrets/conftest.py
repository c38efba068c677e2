"""The secrets test's instruments: one known secret, and a watch on everything a user can see.

:class:`Watch` collects every text a user could read (reprs, error chains,
``traceback.format_exc()``, command output) and, for the whole test, every log
record of every logger at DEBUG (a root handler; loggers with a level of their
own are set to DEBUG, loggers that do not propagate get the handler too),
every warning, and whatever reaches file descriptors 1 and 2 (``capfd``: SDKs
written in C or Rust print there). :meth:`Watch.assert_clean` fails naming
each place the secret showed up, with the text around it.
"""

from __future__ import annotations

import logging
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: The known secret, put in every place a user might put one. Letters and digits
#: only (so %-encoding cannot hide it) and valid base64 (Azure decodes account keys).
SECRET = "PtS3cr3tQx9Zk7Ab"
#: A second one, where a test needs a credential that works (a session token moto accepts).
SECRET2 = "PtT0kenWv4Lm2Nq8"


_SDK_MODULES = (
    "botocore.endpoint", "botocore.httpsession", "botocore.credentials", "boto3", "s3fs", "aiobotocore.endpoint",
    "urllib3", "fsspec", "obstore", "adlfs", "azure.core.pipeline.policies", "azure.storage.blob",
    "azure.storage.queue", "gcsfs", "google.cloud.storage", "google.cloud.pubsub_v1", "kafka", "kafka.admin",
    "redis", "portable_aws.s3", "portable_aws.sqs", "portable_obstore.s3", "portable_azure.blob",
    "portable_azure.queue", "portable_kafka.kafka",
)  # fmt: skip


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception as exc:  # a record that cannot be formatted is a finding, not a crash
            self.lines.append(f"<unformattable record of {record.name}: {exc!r} {record.msg!r} {record.args!r}>")


def chain_of(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception reachable through __cause__, __context__ and groups."""
    seen: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        stack += [current.__cause__, current.__context__]
        if isinstance(current, BaseExceptionGroup):
            stack += list(current.exceptions)
    return seen


class Watch:
    def __init__(self, capfd: pytest.CaptureFixture[str], secrets: tuple[str, ...]) -> None:
        self.capfd = capfd
        self.secrets = secrets
        self.texts: list[tuple[str, str]] = []
        self.handler = _Collect()
        self.warnings: list[warnings.WarningMessage] = []

    # -- what a user reads -----------------------------------------------------------
    def see(self, label: str, text: object) -> None:
        self.texts.append((label, text if isinstance(text, str) else str(text)))

    def obj(self, label: str, obj: Any, *, attributes: bool = True) -> None:
        """repr and str of ``obj`` and, one level down, of its instance attributes that are objects.

        A str attribute is data the user gave (``profile.storage`` is the URL as
        configured), not a repr; ``endpoint`` and ``url`` are what a driver shows,
        so they are watched.
        """
        self.see(f"repr({label})", repr(obj))
        self.see(f"str({label})", str(obj))
        if attributes:
            for name, value in sorted(getattr(obj, "__dict__", {}).items()):
                if isinstance(value, (str, bytes)):
                    continue
                try:
                    self.see(f"repr({label}.{name})", repr(value))
                except Exception:
                    pass
            for name in ("endpoint",):
                value = getattr(obj, name, None)
                if isinstance(value, str):
                    self.see(f"{label}.{name}", value)

    def error(self, label: str, exc: BaseException, formatted: str | None = None) -> None:
        """str and repr of every exception in the chain, and the whole printed traceback."""
        for i, e in enumerate(chain_of(exc)):
            self.see(f"str({label} chain[{i}] {type(e).__name__})", str(e))
            self.see(f"repr({label} chain[{i}])", repr(e))
            for note in getattr(e, "__notes__", ()):
                self.see(f"{label} chain[{i}] note", note)
        self.see(f"traceback.format_exception({label})", "".join(traceback.format_exception(exc)))
        if formatted is not None:
            self.see(f"traceback.format_exc() in {label}", formatted)

    def raises(self, label: str, call: Callable[[], Any], expected: type[BaseException] = Exception) -> BaseException:
        """Run ``call``, which must raise ``expected``; watch the error; return it."""
        try:
            call()
        except expected as exc:
            self.error(label, exc, traceback.format_exc())
            return exc
        pytest.fail(f"{label}: no {expected.__name__} was raised")

    def output(self, label: str) -> str:
        """What was written to stdout and stderr so far (then watched)."""
        out, err = self.capfd.readouterr()
        self.see(f"{label} stdout", out)
        self.see(f"{label} stderr", err)
        return out + err

    # -- the verdict -------------------------------------------------------------------
    def findings(self) -> list[str]:
        self.output("fd")
        places = list(self.texts)
        places += [(f"log line {i}", line) for i, line in enumerate(self.handler.lines)]
        places += [(f"warning {i}", str(w.message)) for i, w in enumerate(self.warnings)]
        found = []
        for label, text in places:
            for secret in self.secrets:
                at = text.find(secret)
                if at >= 0:
                    found.append(f"{label}: ...{text[max(0, at - 160) : at + 40]!r}...")
        return found

    def assert_clean(self) -> None:
        found = self.findings()
        assert not found, f"the secret shows in {len(found)} place(s):\n" + "\n".join(found[:25])


@pytest.fixture
def watch(capfd: pytest.CaptureFixture[str]) -> Iterator[Watch]:
    """A :class:`Watch` on SECRET and SECRET2, with every logger at DEBUG for the test."""
    import importlib

    for module in _SDK_MODULES:  # their loggers exist (and keep any level they set) before the watch opens them
        try:
            importlib.import_module(module)
        except Exception:
            pass
    w = Watch(capfd, (SECRET, SECRET2))
    root = logging.getLogger()
    saved_root = root.level
    saved: list[tuple[logging.Logger, int, bool]] = []
    root.addHandler(w.handler)
    root.setLevel(logging.DEBUG)
    logging.disable(logging.NOTSET)

    def open_every_logger() -> None:
        for logger in list(logging.root.manager.loggerDict.values()):
            if not isinstance(logger, logging.Logger) or any(logger is s[0] for s in saved):
                continue
            saved.append((logger, logger.level, logger.propagate))
            if logger.level > logging.DEBUG:
                logger.setLevel(logging.DEBUG)
            if not logger.propagate:
                logger.addHandler(w.handler)

    open_every_logger()
    w.open_every_logger = open_every_logger  # type: ignore[attr-defined]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w.warnings = caught
        try:
            yield w
        finally:
            root.removeHandler(w.handler)
            root.setLevel(saved_root)
            for logger, level, propagate in saved:
                logger.setLevel(level)
                if not propagate:
                    logger.removeHandler(w.handler)


@pytest.fixture
def no_profile(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A working directory with no portable.toml and no PORTABLE_* variables."""
    import os

    for name in list(os.environ):
        if name.startswith("PORTABLE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path
