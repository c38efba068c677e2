"""``portable queue``: publish, receive, inspect and redrive on any queue URL.

    portable queue publish [--queue URL] [--key K] [--attr NAME=VALUE]... [--idempotency-key K] [BODY|-] [--lines]
    portable queue receive [--queue URL] [--max N] [--wait S] [--lease S] [--ack]
    portable queue stats   [--queue URL]
    portable queue dlq     [--queue URL] [--max N] [--wait S] [--redrive | --purge]

Without ``--queue`` the active profile's ``queue`` is used (``--profile P``
picks the profile). ``receive`` prints one JSON object per message and gives
each back (nack) unless ``--ack``. ``dlq`` reads the dead-letter destination
(the provider's native one, else the profile's ``dead_letter``): it lists by
default, ``--redrive`` republishes each message to the queue without its
dead-letter attributes and removes it from the DLQ, ``--purge`` removes them.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from ..driver.messaging import OutgoingMessage
from ..errors import ConfigError, InvalidArgument
from ..messaging import DEAD_LETTER_ATTRIBUTES, Message, Subscription, open_subscription, open_topic


def register(sub: Any) -> None:
    queue = sub.add_parser("queue", help="publish, receive, inspect and redrive messages")
    commands = queue.add_subparsers(dest="queue_command", required=True)

    def command(name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        p.add_argument("--queue", help="queue URL (default: the profile's queue)")
        p.set_defaults(func=func)
        return p

    p = command("publish", "publish a message (BODY, or stdin with '-' or no BODY)", _publish)
    p.add_argument("body", nargs="?", help="the message body as text; '-' or none reads stdin")
    p.add_argument("--key", help="ordering key")
    p.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE", help="an attribute (repeatable)")
    p.add_argument("--idempotency-key", help="dedup key, carried as portable.idempotency_key")
    p.add_argument("--lines", action="store_true", help="publish each line of the input as one message")

    p = command("receive", "receive messages and print them as JSON lines", _receive)
    p.add_argument("--max", type=int, default=10, help="most messages to print (default 10)")
    p.add_argument("--wait", type=float, default=1.0, help="seconds to wait for the first (default 1)")
    p.add_argument("--lease", type=float, help="lease seconds (default: the subscription's)")
    p.add_argument("--ack", action="store_true", help="ack what was printed (default: give it back)")

    command("stats", "print approximate counts as JSON", _stats)

    p = command("dlq", "list, redrive or purge the dead-letter destination", _dlq)
    p.add_argument("--max", type=int, default=100, help="most messages to handle (default 100)")
    p.add_argument("--wait", type=float, default=1.0, help="seconds to wait for the first (default 1)")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--redrive", action="store_true", help="republish to the queue and remove from the DLQ")
    action.add_argument("--purge", action="store_true", help="remove them from the DLQ")


def _attributes(pairs: list[str]) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq:
            raise InvalidArgument(f"--attr takes NAME=VALUE, got {pair!r}")
        out[name] = value
    return out or None


def _publish(args: argparse.Namespace) -> int:
    topic = open_topic(args.queue, profile=args.profile)
    try:
        data = sys.stdin.buffer.read() if args.body in (None, "-") else args.body.encode("utf-8")
        attributes = _attributes(args.attr)
        if args.lines:
            if args.idempotency_key:
                raise InvalidArgument("--idempotency-key names one message; it cannot be used with --lines")
            bodies = [line for line in data.splitlines() if line]
            ids = topic.publish_batch([OutgoingMessage(b, attributes or {}, args.key) for b in bodies])
        else:
            ids = [topic.publish(data, key=args.key, attributes=attributes, idempotency_key=args.idempotency_key)]
    finally:
        topic.close()
    for mid in ids:
        print(mid)
    return 0


def _shown(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": message.id,
        "key": message.key,
        "delivery_attempt": message.delivery_attempt,
        "publish_time": message.publish_time.isoformat(),
        "attributes": dict(message.attributes),
    }
    try:
        out["body"] = message.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(message.body).decode("ascii")
    return out


def _take(sub: Subscription, limit: int, wait: float, lease: float | None = None) -> list[Message]:
    if limit < 1:
        raise InvalidArgument(f"--max must be >= 1, got {limit}")
    got: list[Message] = []
    while len(got) < limit:
        batch = sub.receive(min(limit - len(got), 1000), wait=wait if not got else 0.0, lease=lease)
        if not batch:
            break
        got.extend(batch)
    return got


def _receive(args: argparse.Namespace) -> int:
    sub = open_subscription(args.queue, profile=args.profile)
    try:
        messages = _take(sub, args.max, args.wait, args.lease)
        for m in messages:
            print(json.dumps(_shown(m), ensure_ascii=False))
        if args.ack:
            sub.ack_many(messages)
        else:
            for m in messages:
                m.nack(0)
    finally:
        sub.close()
    print(f"{len(messages)} message(s){' acked' if args.ack else ''}", file=sys.stderr)
    return 0


def _stats(args: argparse.Namespace) -> int:
    sub = open_subscription(args.queue, profile=args.profile)
    try:
        stats = sub.stats()
    finally:
        sub.close()
    print(json.dumps(
        {
            "available": stats.available,
            "in_flight": stats.in_flight,
            "delayed": stats.delayed,
            "dead_letters": stats.dead_letters,
        }
    ))
    return 0


def _dlq(args: argparse.Namespace) -> int:
    sub = open_subscription(args.queue, profile=args.profile)
    try:
        url = sub.dead_letter_url
        if not url:
            raise ConfigError(
                f"{sub.provider}:// has no native dead-letter queue and no dead_letter is configured; "
                "set the profile's dead_letter"
            )
        dlq = open_subscription(url, profile=args.profile)
    except BaseException:
        sub.close()
        raise
    done = 0
    try:
        messages = _take(dlq, args.max, args.wait)
        if args.redrive:
            topic = open_topic(sub.url, profile=args.profile)
            try:
                for m in messages:
                    attributes = {k: v for k, v in m.attributes.items() if k not in DEAD_LETTER_ATTRIBUTES}
                    topic._publish_keeping(m.body, m.key, attributes)
                    m.ack()
                    done += 1
            finally:
                topic.close()
        elif args.purge:
            dlq.ack_many(messages)
            done = len(messages)
        else:
            for m in messages:
                print(json.dumps(_shown(m), ensure_ascii=False))
                m.nack(0)
    finally:
        dlq.close()
        sub.close()
    verb = "redriven" if args.redrive else "purged" if args.purge else "listed"
    print(f"{done if (args.redrive or args.purge) else len(messages)} dead letter(s) {verb}", file=sys.stderr)
    return 0
