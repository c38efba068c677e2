"""A subprocess that runs ``portable.transfer.sync(SRC, DST)`` and prints each finished object as a JSON line.

``python -m tests.transfer.sync_worker SRC_URL DST_URL`` prints ``{"start": true}``
once both buckets are open, then one line per object (key, status) as it
finishes, then ``{"done": true, "failed": N}``, and exits 0 if no object
failed, else 1 (as ``portable sync`` does). The crash tests SIGKILL it at
random points; they read nothing from its output but its exit code, so the
CLI can take its place.
"""

from __future__ import annotations

import json
import sys

from portable.storage import open_bucket
from portable.transfer import Progress, sync


def main(src_url: str, dst_url: str) -> int:
    src, dst = open_bucket(src_url), open_bucket(dst_url)
    print(json.dumps({"start": True}), flush=True)

    def tick(p: Progress) -> None:
        if p.result is not None:
            print(json.dumps({"key": p.key, "status": p.result.status}), flush=True)

    report = sync(src, dst, concurrency=8, part_size=5 * 1024 * 1024, progress=tick)
    print(json.dumps({"done": True, "failed": report.failed}), flush=True)
    for failure in report.failures():
        print(f"failed: {failure}", file=sys.stderr)
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
