"""A subprocess that runs ``portable.transfer.sync(SRC, DST)`` and prints each finished object as a JSON line.

``python -m tests.transfer.sync_worker SRC_URL DST_URL`` prints ``{"start": true}``
once both buckets are open, then one line per object (key, status) as it
finishes, then ``{"done": true}``. The crash tests SIGKILL it at random points.
"""

from __future__ import annotations

import json
import sys

from portable.storage import open_bucket
from portable.transfer import Progress, sync


def main(src_url: str, dst_url: str) -> None:
    src, dst = open_bucket(src_url), open_bucket(dst_url)
    print(json.dumps({"start": True}), flush=True)

    def tick(p: Progress) -> None:
        if p.result is not None:
            print(json.dumps({"key": p.key, "status": p.result.status}), flush=True)

    report = sync(src, dst, concurrency=4, part_size=5 * 1024 * 1024, progress=tick)
    print(json.dumps({"done": True, "failed": report.failed}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
