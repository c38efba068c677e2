"""Run the shipped contract suites against a user's own providers.

This is what ``portable contract`` does::

    portable contract --profile aws
    portable contract storage=s3://my-bucket/scratch messaging=sqs://probe-queue
    portable contract s3://my-bucket/scratch --junit-xml report.xml --json report.json
    portable contract s3://my-bucket/scratch --face async

A suite with two faces (storage) runs each test on the sync type and on its
:mod:`portable.aio` twin (``--face both``, the default); a test's name in the
report carries its face, ``test_x[sync]`` / ``test_x[async]``.

Each provider is tested inside a namespace of its own that the run creates
and removes: a key prefix ``portable-contract-<run id>/`` under the bucket URL
(one sub-prefix per test), a temporary queue or topic for messaging (through
the suite's ``temporary_url`` hook), and labelled jobs for compute. Existing
data is never read or written.

The report lists per provider what passed, what failed (with the assertion),
and what is not supported (a capability the provider does not claim, with
the reason). The exit status is 1 when any required behaviour failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ..driver.redaction import redact
from ..errors import InvalidArgument, MissingDependency
from ..urls import known_schemes, parse_url

__all__ = ["FACE_CHOICES", "ContractTarget", "ProviderReport", "parse_targets", "run_contract"]

#: ``--face``: which faces of a two-faced suite to run
FACE_CHOICES = ("both", "sync", "async")

#: domain -> (suite "module:Class", fixture the suite needs, fixture body template)
SUITES: dict[str, tuple[str, str]] = {
    "storage": ("portable.testing.storage_suite:StorageContract", "bucket_url"),
    "messaging": ("portable.testing.messaging_suite:MessagingContract", "queue_url"),
    "compute": ("portable.testing.compute_suite:ComputeContract", "launcher_url"),
}
_ALIASES = {"queue": "messaging", "jobs": "compute", "bucket": "storage"}


@dataclasses.dataclass(frozen=True)
class ContractTarget:
    """One provider to test: its domain and URL."""

    domain: str
    url: str

    def __str__(self) -> str:
        return f"{self.domain} {redact(self.url)}"


@dataclasses.dataclass
class ProviderReport:
    """What one provider passed, failed and does not support."""

    target: ContractTarget
    passed: list[str] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    not_supported: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    known_differences: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and bool(self.passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.target.domain,
            "url": redact(self.target.url),
            "ok": self.ok,
            "passed": self.passed,
            "failed": [{"test": t, "reason": r} for t, r in self.failed],
            "not_supported": [{"test": t, "reason": r} for t, r in self.not_supported],
            "known_differences": [{"test": t, "reason": r} for t, r in self.known_differences],
        }


def parse_targets(specs: list[str], profile: str | None) -> list[ContractTarget]:
    """Turn ``DOMAIN=URL`` / bare URL arguments, or a profile, into targets.

    A bare URL's domain is inferred from its scheme when only one domain has
    that scheme; ``mem://`` and other shared schemes need ``storage=`` or
    ``messaging=`` in front.
    """
    targets: list[ContractTarget] = []
    if not specs:
        from ..config import load_profile

        prof = load_profile(profile)
        for domain, entry in (("storage", "storage"), ("messaging", "queue"), ("compute", "jobs")):
            url = prof.url_for(entry)
            if url:
                targets.append(ContractTarget(domain, url))
        return targets
    for spec in specs:
        head, eq, rest = spec.partition("=")
        if eq and "://" not in head:
            domain = _ALIASES.get(head, head)
            if domain not in SUITES:
                raise InvalidArgument(f"{head!r} is not a domain; use storage=, messaging= or compute=")
            targets.append(ContractTarget(domain, rest))
            continue
        scheme = parse_url(spec).scheme
        base = scheme.split("+", 1)[1] if "+" in scheme and scheme.split("+", 1)[0] == "chaos" else scheme
        domains = [d for d in SUITES if base in known_schemes(d)]  # type: ignore[arg-type]
        if len(domains) != 1:
            raise InvalidArgument(
                f"cannot tell which domain {redact(spec)} is for; write "
                + " or ".join(f"{d}={redact(spec)}" for d in (domains or list(SUITES)))
            )
        targets.append(ContractTarget(domains[0], spec))
    return targets


def namespaced_url(url: str, *segments: str) -> str:
    """``url`` with path segments appended before its query string."""
    base, q, query = url.partition("?")
    base = base.rstrip("/")
    if base.endswith(":/"):  # scheme:// with nothing after it
        base += "/"
    joined = base + ("/" if not base.endswith("//") else "") + "/".join(segments)
    return joined + (q + query if q else "")


# The generated test module reads its targets from here (never from a file, so
# that no secret lands on disk).
_TARGETS: dict[str, tuple[ContractTarget, str]] = {}


def _module_source(index: int, target: ContractTarget) -> str:
    suite, fixture = SUITES[target.domain]
    module, _, cls = suite.partition(":")
    return textwrap.dedent(
        f"""
        import pytest
        from {module} import {cls}
        from portable.testing.contract import known_differences, target_fixture

        class TestContract{index}({cls}):
            xfail = known_differences({index!r})

            @pytest.fixture
            def {fixture}(self, unique_name, request):
                yield from target_fixture({index!r}, unique_name, request)
        """
    )


def known_differences(index: int) -> dict[str, str]:
    """The contract tests target ``index``'s driver fails by design (its ``known_differences``)."""
    from ..urls import driver_class

    target, _run_id = _TARGETS[str(index)]
    cls = driver_class(target.domain, target.url)  # type: ignore[arg-type]
    return dict(getattr(cls, "known_differences", {}) or {})


def target_fixture(index: int, unique_name: str, request: Any) -> Iterator[str]:
    """Yield the namespaced URL for one test of target ``index``; clean up after it."""
    target, run_id = _TARGETS[str(index)]
    suite_module = importlib.import_module(SUITES[target.domain][0].partition(":")[0])
    hook: Callable[..., Any] | None = getattr(suite_module, "temporary_url", None)
    if target.domain == "storage":
        url = namespaced_url(target.url, f"portable-contract-{run_id}", unique_name)
        yield url
        _empty_bucket(url)
    elif hook is not None:
        yield from hook(target.url, f"pc{run_id[:8]}{unique_name[-8:]}")
    else:
        yield target.url


class _Collector:
    def __init__(self) -> None:
        self.outcomes: dict[str, tuple[str, str]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = report.nodeid
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            if hasattr(report, "wasxfail"):
                self.outcomes[nodeid] = ("xfail", str(report.wasxfail))
            elif report.outcome == "skipped":
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                self.outcomes[nodeid] = ("skipped", reason.removeprefix("Skipped: "))
            elif report.outcome == "failed":
                text = getattr(report, "longreprtext", "") or str(report.longrepr)
                last = [ln for ln in text.splitlines() if ln.startswith("E ")][-3:]
                self.outcomes[nodeid] = ("failed", redact(" / ".join(ln[2:].strip() for ln in last) or text[-300:]))
            else:
                self.outcomes[nodeid] = ("passed", "")
        elif report.when == "teardown" and report.outcome == "failed" and nodeid not in self.outcomes:
            self.outcomes[nodeid] = ("failed", "teardown failed")


def run_contract(
    targets: list[ContractTarget],
    *,
    junit_xml: str | None = None,
    json_path: str | None = None,
    select: str | None = None,
    face: str = "both",
    out: TextIO = sys.stdout,
) -> tuple[int, list[ProviderReport]]:
    """Run the suites for ``targets``; print the report; return (exit code, reports).

    ``face`` (``"both"``, ``"sync"`` or ``"async"``) picks the faces of a suite
    that has two; a one-faced suite runs as it is.

    Raises:
        InvalidArgument: ``face`` is not one of :data:`FACE_CHOICES`.
    """
    if face not in FACE_CHOICES:
        raise InvalidArgument(f"face must be one of {', '.join(FACE_CHOICES)}, got {face!r}")
    try:
        import pytest
    except ModuleNotFoundError as exc:
        raise MissingDependency("portable contract needs pytest: pip install 'portable-cloud[testing]'") from exc
    run_id = uuid.uuid4().hex[:12]
    reports: list[ProviderReport] = []
    with tempfile.TemporaryDirectory(prefix="portable-contract-") as tmp:
        for i, target in enumerate(targets):
            module = SUITES[target.domain][0].partition(":")[0]
            try:
                importlib.import_module(module)
            except ModuleNotFoundError:
                report = ProviderReport(target)
                report.failed.append(("suite", f"the {target.domain} suite is not installed ({module})"))
                reports.append(report)
                continue
            _TARGETS[str(i)] = (target, run_id)
            Path(tmp, f"test_contract_{i}.py").write_text(_module_source(i, target))
        collector = _Collector()
        args = [tmp, "-q", "-p", "no:cacheprovider", "--rootdir", tmp, "-o", "addopts=", "--no-header", "-rN",
                "-W", "ignore::pytest.PytestAssertRewriteWarning"]
        if junit_xml:
            args += ["--junitxml", junit_xml]
        if select:
            args += ["-k", select]
        if _TARGETS:
            saved = os.environ.get("PORTABLE_CONTRACT_FACES")
            os.environ["PORTABLE_CONTRACT_FACES"] = "" if face == "both" else face
            try:
                pytest.main(args, plugins=[collector])
            finally:
                if saved is None:
                    os.environ.pop("PORTABLE_CONTRACT_FACES", None)
                else:
                    os.environ["PORTABLE_CONTRACT_FACES"] = saved
        for i, target in enumerate(targets):
            if str(i) not in _TARGETS:
                continue
            report = ProviderReport(target)
            prefix = f"test_contract_{i}.py::"
            for nodeid, (outcome, reason) in sorted(collector.outcomes.items()):
                if not nodeid.startswith(prefix):
                    continue
                name = nodeid.split("::")[-1]
                if outcome == "passed":
                    report.passed.append(name)
                elif outcome == "failed":
                    report.failed.append((name, reason))
                elif outcome == "xfail":
                    report.known_differences.append((name, reason))
                else:
                    report.not_supported.append((name, reason))
            if not report.passed and not report.failed:
                report.failed.append(("suite", "no test ran"))
            reports.append(report)
            _TARGETS.pop(str(i), None)
        _cleanup_storage([t for t in targets if t.domain == "storage"], run_id)
    _print(reports, out)
    if json_path:
        Path(json_path).write_text(json.dumps({"run_id": run_id, "providers": [r.as_dict() for r in reports]}, indent=2))
    return (0 if reports and all(r.ok for r in reports) else 1), reports


def _empty_bucket(url: str) -> None:
    """Delete every object under ``url``; a provider broken on purpose is left as it is."""
    from ..errors import PortableError
    from ..storage import open_bucket

    try:
        with open_bucket(url) as bucket:
            bucket.delete_many([e.key for e in bucket.list()])
    except PortableError:
        return  # its report already names the failure


def _cleanup_storage(targets: list[ContractTarget], run_id: str) -> None:
    """Remove what is left of the run's prefix (each test already emptied its own)."""
    from ..errors import PortableError
    from ..storage import open_bucket

    for target in targets:
        url = namespaced_url(target.url, f"portable-contract-{run_id}")
        _empty_bucket(url)
        try:
            with open_bucket(url) as bucket:
                root = bucket.as_(Path)
        except PortableError:
            continue  # not a local folder: nothing more to remove
        for folder, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only empty folders go


def _print(reports: list[ProviderReport], out: TextIO) -> None:
    print("\nportable contract report", file=out)
    for report in reports:
        verdict = "OK" if report.ok else "FAILED"
        print(f"\n{report.target}: {verdict}", file=out)
        print(f"  passed          {len(report.passed)}", file=out)
        print(f"  failed          {len(report.failed)}", file=out)
        for name, reason in report.failed:
            print(f"    - {name}: {reason[:240]}", file=out)
        print(f"  not supported   {len(report.not_supported)}", file=out)
        for name, reason in report.not_supported:
            print(f"    - {name}: {reason[:160]}", file=out)
        if report.known_differences:
            print(f"  known differences {len(report.known_differences)}", file=out)
            for name, reason in report.known_differences:
                print(f"    - {name}: {reason[:160]}", file=out)
