"""Interop: portable on one side, each provider's own Python client on the other, both directions."""
