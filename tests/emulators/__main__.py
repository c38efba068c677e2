"""``python -m tests.emulators up NAME...|down [NAME...]|status|list`` (from the repo root).

``up`` starts emulators in the background, prints their endpoints (credentials
as ``***``) and records their PIDs in ``.cache/emulators/state.json``; ``down``
stops exactly the processes recorded there, checked by PID and start time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from . import EMULATORS, create
from .harness import (
    STATE_DIR,
    EmulatorError,
    ProcessRecord,
    is_listening,
    redact,
    related_processes,
    terminate,
)
from .k8s import ordered_stop

#: Overrides the state file (the harness's own test uses it to keep away from yours).
STATE_ENV = "PORTABLE_EMULATOR_STATE"


def state_file() -> Path:
    return Path(os.environ.get(STATE_ENV) or STATE_DIR / "state.json")


def load_state() -> dict[str, dict[str, Any]]:
    try:
        state: dict[str, dict[str, Any]] = json.loads(state_file().read_text())
    except FileNotFoundError:
        return {}
    return state


def save_state(state: dict[str, dict[str, Any]]) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    tmp.chmod(0o600)  # it holds the Azurite connection string
    tmp.replace(path)


def live_processes(entry: dict[str, Any]) -> set[ProcessRecord]:
    records = [ProcessRecord(pid, start) for pid, start in entry["processes"]]
    return related_processes(records, int(entry["pgid"]))


def describe(entry: dict[str, Any]) -> str:
    lines = [f"{entry['name']}: pid {entry['pid']}, ports {', '.join(map(str, entry['ports']))}"]
    lines += [f"  {key} = {value}" for key, value in redact(entry["endpoints"]).items()]
    lines += [f"  export {key}={value}" for key, value in redact(entry["env"]).items()]
    lines.append(f"  log: {entry['log']}")
    return "\n".join(lines)


def cmd_up(names: list[str]) -> int:
    state = load_state()
    failed = 0
    for name in names:
        if name in state and live_processes(state[name]):
            print(f"{name}: already running\n{describe(state[name])}")
            continue
        emulator = create(name)
        try:
            emulator.start()
        except EmulatorError as exc:
            print(f"{name}: FAILED: {exc}", file=sys.stderr)
            failed += 1
            continue
        state[name] = emulator.detach()
        save_state(state)
        print(describe(state[name]))
        # one bare NAME=VALUE line per portable URL, for `eval`/`export` in another shell
        for key, value in state[name]["env"].items():
            if key.startswith("PORTABLE_") and key.endswith("_URL"):
                print(f"{key}={value}")
    print(f"state: {state_file()}")
    return 1 if failed else 0


def cmd_down(names: list[str]) -> int:
    state = load_state()
    stuck = 0
    for name in names or list(state):
        entry = state.get(name)
        if entry is None:
            print(f"{name}: not recorded as running")
            continue
        if name == "k8s":  # its supervisor stops the apiserver before etcd: ask it alone first
            for pid, start in entry["processes"]:
                if pid == entry["pid"]:
                    ordered_stop(ProcessRecord(pid, start))
        survivors = terminate(live_processes(entry), int(entry["pgid"]), grace=20.0)
        if survivors:
            print(f"{name}: still alive after SIGKILL: {sorted(survivors)}", file=sys.stderr)
            stuck += 1
            continue
        if entry.get("workdir"):
            shutil.rmtree(Path(entry["workdir"]), ignore_errors=True)
        del state[name]
        save_state(state)
        print(f"{name}: stopped (pid {entry['pid']})")
    return 1 if stuck else 0


def cmd_status() -> int:
    state = load_state()
    if not state:
        print("no emulator recorded as running")
    for name, entry in state.items():
        alive = sorted(record.pid for record in live_processes(entry))
        listening = [port for port in entry["ports"] if is_listening(port)]
        health = "running" if alive else "DEAD (run `down` to clear)"
        print(f"{name}: {health}; pids {alive}; listening on {listening}; log {entry['log']}")
    return 0


def cmd_list() -> int:
    for name in EMULATORS:
        ok, reason = create(name).available()
        print(f"{name}: {'installed' if ok else 'NOT INSTALLED: ' + reason}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.emulators", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start emulators in the background")
    up.add_argument("names", nargs="+", choices=list(EMULATORS), metavar="NAME")
    down = commands.add_parser("down", help="stop what `up` started (all, or the names given)")
    down.add_argument("names", nargs="*", metavar="NAME")
    commands.add_parser("status", help="show what `up` started and whether it still runs")
    commands.add_parser("list", help="show every emulator and whether it is installed")
    args = parser.parse_args(argv)
    if args.command == "up":
        return cmd_up(args.names)
    if args.command == "down":
        return cmd_down(args.names)
    if args.command == "status":
        return cmd_status()
    return cmd_list()


if __name__ == "__main__":
    sys.exit(main())
