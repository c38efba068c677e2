"""Subcommands of the ``portable`` command, one module per domain.

Each module exposes ``register(subparsers)``, which adds its parsers and sets
``func`` on each to a callable taking the parsed ``argparse.Namespace`` and
returning an exit code. :mod:`portable.cli` imports the modules listed in
``portable.cli.COMMAND_MODULES``.
"""
