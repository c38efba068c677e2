"""Fixtures the interop modules share: the emulators' own, plus the AWS session and clients.

Every emulator fixture of ``tests.emulators.fixtures`` (``kafka_broker``, ``tansu_broker``,
``moto_server``, ``azurite``, ``fake_gcs``, ``pubsub_emulator``) is loaded by
``tests/conftest.py`` and usable here as it is. This module adds what the AWS adapter tests
have in their own conftest, so that an interop module needs no copy:

* ``aws``: moto's ``endpoint_url`` and ``region``, with credentials in the environment for
  the session (the drivers take credentials only from the SDK's chain);
* ``query``: the URL query that points a portable driver at moto;
* :func:`boto3_client`: boto3's own client for a service on moto (the native side).

Keep provider-specific helpers in the provider's module.
"""

from __future__ import annotations

from tests.adapters.aws.conftest import aws, boto3_client, query

__all__ = ["aws", "boto3_client", "query"]
