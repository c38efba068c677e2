"""The cost meter: a guard observer that counts every request by its provider's price class.

    >>> from portable.cost import CostMeter
    >>> from portable.storage import open_bucket
    >>> with CostMeter() as meter:                        # registered while the block runs
    ...     bucket = open_bucket("mem://")
    ...     bucket.put("a", b"x")                         # mem:// has no request price
    ...     meter.usage().requests
    0

It sees what the guard sees (:mod:`portable.telemetry._observe`): one call per
driver method, each attempt of it, and its result. How a call becomes requests
is :mod:`portable.cost._classes`; how requests become dollars is
:mod:`portable.cost._report` with the table of :mod:`portable.cost.prices`.
Counting costs a lock and a few dict updates per call, only while a meter is
registered.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import ConfigError
from ..telemetry._observe import CallInfo, add_observer
from ._classes import Counted, StreamState, count_call, failed_attempt, family_of
from ._report import FORMAT, Usage, UsageRow
from ._settings import CostSettings, load_cost_settings

__all__ = ["CostMeter"]


class _Scope:
    """One metered call: its failed attempts are requests too."""

    __slots__ = ("family", "info", "meter", "resource", "service")

    def __init__(self, meter: CostMeter, info: CallInfo, family: str, resource: str, service: str) -> None:
        self.meter = meter
        self.info = info
        self.family = family
        self.resource = resource
        self.service = service

    def attempt_failed(self, attempt: int, exc: BaseException, retry_in: float | None) -> None:
        charge = failed_attempt(self.family, self.info)
        self.meter._record(self, Counted((charge,)))

    def rejected(self, exc: BaseException) -> None:
        """Nothing was sent."""

    def ended(self, error: BaseException | None, result: Any) -> None:
        if error is None:
            with self.meter._lock:
                counted = count_call(self.family, self.info, result, self.meter._streams)
                self.meter._record(self, counted)


class CostMeter:
    """Counts the requests of every guarded call, per service, bucket or queue, and price class.

    Register it with :meth:`install` (or use it as a context manager); :meth:`usage`
    returns the counts so far, :meth:`report` prices them, :meth:`save` writes them
    for ``portable cost --from FILE``. With an OpenTelemetry meter provider set,
    it also exports ``portable.cost.requests``, ``portable.cost.usd`` and
    ``portable.cost.egress`` (see :mod:`portable.cost._otel`).

    Where providers differ: S3, GCS, Azure Blob and Azure Queue bill per request;
    SQS per 64 KiB chunk of each request's payload; Pub/Sub per byte, at least
    1,000 bytes a request. Kafka, file://, mem:// and sqlite:// are not counted.

    Args:
        settings: the service, egress and price settings. Defaults to the ``[cost]``
            table of portable.toml (:func:`load_cost_settings`), else the defaults.
        export: export OpenTelemetry metrics when a meter provider is set. Defaults to True.
        meter_provider: the OpenTelemetry meter provider to export to. Defaults to the global
            one, looked up now: a meter made before the provider was set exports nothing.
    """

    def __init__(
        self, settings: CostSettings | None = None, *, export: bool = True, meter_provider: Any = None
    ) -> None:
        self.settings = settings if settings is not None else load_cost_settings()
        self._lock = threading.RLock()  # ended() holds it while a stream's state moves
        self._requests: dict[tuple[str, str, str, str], list[float]] = {}
        self._bytes: dict[tuple[str, str], list[int]] = {}
        self._streams: dict[Any, StreamState] = {}
        self._services: dict[tuple[str, str], str] = {}  # (family, resource) -> its price-table entry
        self._started = time.time()
        self._remove: Callable[[], None] | None = None
        self._export: Any = None
        if export:
            from ._otel import CostInstruments

            self._export = CostInstruments.if_provider_set(meter_provider)

    # -- registering ------------------------------------------------------
    def install(self) -> CostMeter:
        """Observe every guarded call from now on (idempotent); returns self."""
        if self._remove is None:
            self._remove = add_observer(self)
        return self

    def uninstall(self) -> None:
        """Stop observing; the counts so far are kept."""
        if self._remove is not None:
            self._remove()
            self._remove = None

    def __enter__(self) -> CostMeter:
        return self.install()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.uninstall()

    # -- the observer ----------------------------------------------------
    def started(self, info: CallInfo) -> _Scope | None:
        """Follow a call of a provider with a request price; ignore the others."""
        family = family_of(info.provider)
        if family is None:
            return None
        resource = info.target or info.endpoint
        try:
            service = self._services[(family, resource)]
        except KeyError:
            service = self._services[(family, resource)] = self.settings.service_for(family, resource).service
        return _Scope(self, info, family, resource, service)

    def _record(self, scope: _Scope, counted: Counted) -> None:
        with self._lock:
            for charge in counted.charges:
                key = (scope.service, scope.family, scope.resource, charge.price_class)
                row = self._requests.get(key)
                if row is None:
                    row = self._requests[key] = [0, 0.0]
                row[0] += charge.requests
                row[1] += charge.units
            if counted.bytes_in or counted.bytes_out:
                moved = self._bytes.setdefault((scope.service, scope.resource), [0, 0])
                moved[0] += counted.bytes_in
                moved[1] += counted.bytes_out
        if self._export is not None:
            self._export.record(self.settings, scope.service, scope.resource, counted)

    # -- results ---------------------------------------------------------
    def usage(self) -> Usage:
        """The counts so far (a snapshot)."""
        with self._lock:
            rows = [
                UsageRow(service, family, resource, price_class, int(n), units)
                for (service, family, resource, price_class), (n, units) in sorted(self._requests.items())
            ]
            moved = {key: (b[0], b[1]) for key, b in sorted(self._bytes.items())}
        return Usage(rows, moved, started=self._started, ended=time.time())

    def reset(self) -> None:
        """Forget the counts (streams being written are still followed)."""
        with self._lock:
            self._requests.clear()
            self._bytes.clear()
            self._started = time.time()

    def report(self) -> Any:
        """The counts so far, priced with this meter's settings (a :class:`~portable.cost.Report`)."""
        return self.usage().priced(self.settings)

    def save(self, path: str | Path) -> Path:
        """Write the counts so far as JSON (for ``portable cost --from FILE``); returns the path."""
        target = Path(path)
        usage = self.usage()
        data = usage.to_dict()
        data["saved"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        target.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return target

    @staticmethod
    def load(path: str | Path) -> Usage:
        """The counts :meth:`save` wrote.

        Raises:
            ConfigError: the file is missing, not JSON, or not a saved meter.
        """
        source = Path(path)
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{source}: cannot be read: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(f"{source}: not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"{source}: not a saved cost meter (format {FORMAT!r} expected)")
        return Usage.from_dict(data, str(source))

