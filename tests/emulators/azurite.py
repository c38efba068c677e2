"""Azurite, Microsoft's Azure Storage emulator: Blob, Queue and Table.

Installed from npm into ``.cache/azurite`` (``npm install --prefix``, pinned) and run
with the machine's Node.js, always with ``--disableTelemetry --inMemoryPersistence
--skipApiVersionCheck --loose``.

Adapter notes:
    - Azurite 3.35.0 is the newest release that runs on Node.js 20 (3.36+ needs 21+,
      3.37 needs 22+). ``--skipApiVersionCheck`` lets newer azure-storage SDKs send an
      ``x-ms-version`` this release does not know: without it, the current
      azure-storage-blob (API 2026-10-06) gets "The API version ... is not supported
      by Azurite" on its first call.
    - URLs are path-style: ``http://127.0.0.1:<port>/devstoreaccount1/<container>``.
      Use the `connection_string` (it names all three endpoints) rather than
      building URLs; adlfs takes ``connection_string=`` too.
    - The account key is the public, well-known development key, but treat it as
      a secret anyway: `EmulatorInfo` and the ``up`` command print it as ``***``.
    - ``--loose`` makes Azurite ignore headers and parameters it does not support
      instead of failing the request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shutil
from email.utils import formatdate
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .harness import (
    CACHE_DIR,
    INSTALL_SCRIPT,
    LOOPBACK,
    Emulator,
    EmulatorInfo,
    LaunchPlan,
    free_port,
    http_request,
)

AZURITE_VERSION = "3.35.0"
AZURITE_PREFIX = CACHE_DIR / "azurite"
AZURITE_SCRIPT = AZURITE_PREFIX / "node_modules" / "azurite" / "dist" / "src" / "azurite.js"

ACCOUNT_NAME = "devstoreaccount1"
# The fixed development-storage key, documented by Microsoft for every emulator user.
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_X_MS_VERSION = "2021-08-06"
EXTENT_MEMORY_LIMIT_MB = 2048


def installed_version() -> str | None:
    manifest = AZURITE_PREFIX / "node_modules" / "azurite" / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (FileNotFoundError, KeyError, ValueError):
        return None


def connection_string(blob: str, queue: str, table: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={blob};QueueEndpoint={queue};TableEndpoint={table};"
    )


def shared_key_request(url: str, *, method: str = "GET", timeout: float = 5.0) -> tuple[int, bytes]:
    """A body-less Blob/Queue request signed with the account key (Shared Key scheme).

    Used by the health check and the harness test; adapters use the Azure SDKs.
    """
    parts = urlsplit(url)
    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": _X_MS_VERSION}
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    resource = f"/{ACCOUNT_NAME}{parts.path or '/'}"
    for key, value in sorted((k.lower(), v) for k, v in parse_qsl(parts.query)):
        resource += f"\n{key}:{value}"
    # urllib adds a Content-Type to any request with a body, so name one and sign it.
    body = b"" if method in ("PUT", "POST") else None
    content_type = "application/octet-stream" if body is not None else ""
    # VERB, eleven standard headers (only Content-Type, the 5th, is set), x-ms-*, resource.
    standard = ["", "", "", "", content_type, "", "", "", "", "", ""]
    string_to_sign = "\n".join([method, *standard]) + "\n" + canonical_headers + resource
    digest = hmac.new(base64.b64decode(ACCOUNT_KEY), string_to_sign.encode(), hashlib.sha256)
    headers["Authorization"] = (
        f"SharedKey {ACCOUNT_NAME}:{base64.b64encode(digest.digest()).decode()}"
    )
    if content_type:
        headers["Content-Type"] = content_type
    return http_request(url, method=method, headers=headers, body=body, timeout=timeout)


class Azurite(Emulator):
    name = "azurite"
    stop_grace = 5.0

    def available(self) -> tuple[bool, str]:
        if shutil.which("node") is None:
            return False, "no `node` on PATH (apt-get install nodejs)"
        if not AZURITE_SCRIPT.exists():
            return False, (
                f"Azurite is not installed in {AZURITE_PREFIX}: npm install --prefix "
                f"{AZURITE_PREFIX} azurite@{AZURITE_VERSION} (or {INSTALL_SCRIPT})"
            )
        return True, ""

    def plan(self, workdir: Path) -> LaunchPlan:
        blob_port, queue_port, table_port = free_port(), free_port(), free_port()
        node = shutil.which("node")
        assert node is not None
        argv = [
            node, str(AZURITE_SCRIPT),
            "--blobHost", LOOPBACK, "--blobPort", str(blob_port),
            "--queueHost", LOOPBACK, "--queuePort", str(queue_port),
            "--tableHost", LOOPBACK, "--tablePort", str(table_port),
            # In memory, capped; --location is refused with --inMemoryPersistence.
            "--extentMemoryLimit", str(EXTENT_MEMORY_LIMIT_MB),
            "--disableTelemetry",
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--loose",
            "--silent",
        ]  # fmt: skip
        blob = f"http://{LOOPBACK}:{blob_port}/{ACCOUNT_NAME}"
        queue = f"http://{LOOPBACK}:{queue_port}/{ACCOUNT_NAME}"
        table = f"http://{LOOPBACK}:{table_port}/{ACCOUNT_NAME}"
        conn = connection_string(blob, queue, table)
        info = EmulatorInfo(
            name=self.name,
            host=LOOPBACK,
            port=blob_port,
            pid=0,
            ports=(blob_port, queue_port, table_port),
            endpoints={
                "blob_endpoint": blob,
                "queue_endpoint": queue,
                "table_endpoint": table,
                "account_name": ACCOUNT_NAME,
                "account_key": ACCOUNT_KEY,
                "connection_string": conn,
            },
            env={"AZURE_STORAGE_CONNECTION_STRING": conn},
        )
        return LaunchPlan(argv=argv, info=info)

    def health_check(self, info: EmulatorInfo, timeout: float) -> None:
        for service in ("blob", "queue"):
            url = info.endpoints[f"{service}_endpoint"] + "/?comp=list"
            status, body = shared_key_request(url, timeout=timeout)
            if status != 200:
                raise RuntimeError(f"azurite {service} answered {status}: {body[:300]!r}")
        # Table uses another signing scheme; any HTTP answer shows it is serving.
        http_request(info.endpoints["table_endpoint"] + "/Tables", timeout=timeout)
