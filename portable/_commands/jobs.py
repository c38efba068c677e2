"""``portable jobs``: submit and follow jobs on the profile's launcher (or ``--jobs URL``).

    portable jobs submit [--name N] [--env K=V]... [--label K=V]... [--workdir D]
                         [--retries N] [--timeout S] [--cpu X] [--memory M] [--gpu N]
                         [--image I] [--key KEY] [--checkpoint URL] [--wait] -- CMD [ARG...]
    portable jobs status ID [--json]
    portable jobs logs ID [-f]
    portable jobs cancel ID
    portable jobs preempt ID [--grace S]
    portable jobs list [--label K=V]... [--state S]... [--json]

``submit`` prints the job id (with ``--wait``, then waits and exits with 0 if
the job succeeded, 1 if not). Statuses print as one line per job, or JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..compute import JobSpec, JobState, JobStatus, Launcher, open_launcher
from ..errors import InvalidArgument


def register(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="submit, inspect and cancel jobs")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)

    def cmd(name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = jobs_sub.add_parser(name, help=help_text)
        p.add_argument("--jobs", metavar="URL", help="launcher URL (default: the profile's jobs)")
        p.set_defaults(func=func)
        return p

    p = cmd("submit", "start a job; print its id", _submit)
    p.add_argument("--name", default="job")
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--label", action="append", default=[], metavar="K=V")
    p.add_argument("--workdir")
    p.add_argument("--retries", type=int, default=0)
    p.add_argument("--timeout", type=float)
    p.add_argument("--cpu")
    p.add_argument("--memory", help="MiB, or with a unit: 512Mi, 2Gi")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--image")
    p.add_argument("--key", dest="idempotency_key", help="idempotency key: the same key never launches twice")
    p.add_argument("--checkpoint", dest="checkpoint_url", metavar="URL", help="bucket URL for the job's checkpoint")
    p.add_argument("--wait", action="store_true", help="wait for the job; exit 0 only if it succeeded")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    p = cmd("status", "print a job's status", _status)
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p = cmd("logs", "print a job's output", _logs)
    p.add_argument("job_id")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p = cmd("cancel", "cancel a job", _cancel)
    p.add_argument("job_id")
    p = cmd("preempt", "interrupt a running job and restart it, as a reclaimed spot VM would", _preempt)
    p.add_argument("job_id")
    p.add_argument("--grace", type=float, help="seconds between SIGTERM and SIGKILL")
    p = cmd("list", "list jobs", _list)
    p.add_argument("--label", action="append", default=[], metavar="K=V")
    p.add_argument("--state", action="append", default=[], choices=[s.value for s in JobState])
    p.add_argument("--json", action="store_true")


def _launcher(args: argparse.Namespace) -> Launcher:
    return open_launcher(args.jobs, profile=args.profile)


def _key_value_pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise InvalidArgument(f"--{what} takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _status_line(status: JobStatus) -> str:
    code = "-" if status.exit_code is None else str(status.exit_code)
    when = status.created.strftime("%Y-%m-%d %H:%M:%S") if status.created else "-"
    reason = f"  {status.reason}" if status.reason else ""
    return f"{status.job_id}  {status.state.value:<9}  {code:>4}  {when}  {status.name}{reason}"


def _submit(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    resources: dict[str, Any] = {}
    if args.cpu is not None:
        resources["cpu"] = args.cpu
    if args.memory is not None:
        resources["memory"] = args.memory
    if args.gpu:
        resources["gpu"] = args.gpu
    spec = JobSpec(
        command=command,
        name=args.name,
        image=args.image,
        env=_key_value_pairs(args.env, "env"),
        workdir=args.workdir,
        resources=resources or None,
        retries=args.retries,
        timeout=args.timeout,
        labels=_key_value_pairs(args.label, "label"),
        idempotency_key=args.idempotency_key,
        checkpoint_url=args.checkpoint_url,
    )
    with _launcher(args) as launcher:
        job = launcher.submit(spec)
        print(job.id, flush=True)
        if not args.wait:
            return 0
        status = job.wait()
    print(_status_line(status), file=sys.stderr)
    return 0 if status.succeeded else 1


def _status(args: argparse.Namespace) -> int:
    with _launcher(args) as launcher:
        status = launcher.get(args.job_id).status()
    print(json.dumps(status.as_dict(), indent=2) if args.json else _status_line(status))
    return 0


def _logs(args: argparse.Namespace) -> int:
    with _launcher(args) as launcher:
        for line in launcher.get(args.job_id).logs(follow=args.follow):
            print(line, flush=args.follow)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with _launcher(args) as launcher:
        launcher.get(args.job_id).cancel()
    print(f"cancel requested for {args.job_id}", file=sys.stderr)
    return 0


def _preempt(args: argparse.Namespace) -> int:
    with _launcher(args) as launcher:
        launcher.preempt(args.job_id, grace=args.grace)
    print(f"preemption requested for {args.job_id}", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    states = [JobState(s) for s in args.state] or None
    with _launcher(args) as launcher:
        found = launcher.list(_key_value_pairs(args.label, "label"), states=states)
    if args.json:
        print(json.dumps([s.as_dict() for s in found], indent=2))
    else:
        for status in found:
            print(_status_line(status))
    return 0
