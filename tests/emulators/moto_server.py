"""moto in server mode: S3, SQS, DynamoDB and Batch (state only, no containers) over HTTP.

Installed from PyPI as ``moto[server]``; runs as ``python -m moto.server`` with the
interpreter that runs the tests. One server answers every AWS service on one
port; the service is told apart by the request's signature.

Adapter notes:
    - Any access key works; use ``testing``/``testing`` and region ``us-east-1``.
    - S3 must use path-style addressing (``addressing_style="path"``): there is no
      DNS for ``<bucket>.127.0.0.1``.
    - moto closes every connection and serves a few hundred requests a second: it
      is for correctness, not speed.
    - ``POST {endpoint_url}/moto-api/reset`` wipes all state (every service).
    - It runs through ``tests/emulators/moto_run.py``, which fixes one race of moto's
      (a new object's lazily computed etag read its buffer without the key's lock).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from .harness import LOOPBACK, Emulator, EmulatorInfo, LaunchPlan, free_port, http_request

MOTO_VERSION = "5.2.5"


class MotoServer(Emulator):
    name = "moto"

    def available(self) -> tuple[bool, str]:
        missing = [
            m for m in ("moto", "flask", "flask_cors") if importlib.util.find_spec(m) is None
        ]
        if missing:
            return False, (
                f"{', '.join(missing)} not importable from {sys.executable}: "
                f"pip install 'moto[server]=={MOTO_VERSION}' (or bash scripts/install-emulators.sh)"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        port = free_port()
        url = f"http://{LOOPBACK}:{port}"
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=port,
            pid=0,
            ports=(port,),
            endpoints={"endpoint_url": url, "region": "us-east-1"},
            env={
                "AWS_ENDPOINT_URL": url,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1",
            },
        )
        # moto's server with its FakeKey.etag race fixed (see moto_run.py), from the repository root
        argv = [sys.executable, "-m", "tests.emulators.moto_run", "-H", LOOPBACK, "-p", str(port)]
        return LaunchPlan(argv=argv, info=info, cwd=Path(__file__).resolve().parents[2])

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        # An unsigned GET / is S3's ListBuckets in moto.
        status, body = http_request(info.endpoints["endpoint_url"] + "/", timeout=timeout)
        if status != 200 or b"ListAllMyBucketsResult" not in body:
            raise RuntimeError(f"moto answered {status}: {body[:200]!r}")
