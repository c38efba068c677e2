"""The outbox tests use the transfer tests' emulator buckets (one per session)."""

from tests.transfer.conftest import az_place, gs_place, s3_place

__all__ = ["az_place", "gs_place", "s3_place"]
