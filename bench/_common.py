"""Shared helpers for the benchmarks: interleaved rounds, medians, ratios, JSON + markdown output.

Every benchmark runs its contestants side by side in one process and one run,
round-robin (A, B, C, A, B, C, ...), so that a noisy neighbour slows all of
them alike; it reports medians and min-max, and ratios against a named
baseline. Absolute times on these machines mean little; ratios do.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def interleave(contestants: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """Run each contestant ``rounds`` times, round-robin; each returns its operation count.

    Returns operations per second per round, per contestant.
    """
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    for _ in range(rounds):
        for name, fn in contestants.items():
            t0 = time.perf_counter()
            ops = fn()
            rates[name].append(ops / (time.perf_counter() - t0))
    return rates


def summarise(rates: dict[str, list[float]], baseline: str, *, paired: bool = False) -> list[dict[str, Any]]:
    """A row per contestant: median rate, min, max, the ratio of its median to the baseline's, us per op.

    ``paired``: also the median and the range of the per-round ratios (round k of a contestant over
    round k of the baseline, run side by side): a load that drifts during the run moves both rates
    of a round alike, so these are steadier than the ratio of medians when the rounds spread widely.
    """
    base = statistics.median(rates[baseline])
    rows = []
    for name, values in rates.items():
        med = statistics.median(values)
        row: dict[str, Any] = {
            "contestant": name,
            "median_ops_per_s": round(med, 1),
            "min": round(min(values), 1),
            "max": round(max(values), 1),
            "ratio_vs_" + baseline: round(med / base, 3),
            "us_per_op": round(1e6 / med, 3),
        }
        if paired:
            ratios = [v / b for v, b in zip(values, rates[baseline], strict=True)]
            row["paired_ratio_median"] = round(statistics.median(ratios), 3)
            row["paired_ratio_range"] = f"{min(ratios):.3f}-{max(ratios):.3f}"
        rows.append(row)
    return rows


def table(title: str, rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write(name: str, sections: dict[str, list[dict[str, Any]]], extra: dict[str, Any] | None = None) -> None:
    RESULTS.mkdir(exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, **(extra or {}), "results": sections}, indent=2))
    md = f"# {name}\n\n{meta}\n\n" + "\n".join(table(t, rows) for t, rows in sections.items())
    (RESULTS / f"{name}.md").write_text(md)
    print(md)


def start_broker() -> tuple[str, Any]:
    """A single-node Apache Kafka 4 (KRaft) from the test harness: its bootstrap address and the broker to stop."""
    from tests.emulators import create

    broker = create("kafka")
    info = broker.start()
    return info.endpoints["bootstrap"], broker
