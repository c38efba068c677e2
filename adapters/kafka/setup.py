"""Builds portable_kafka._speedups, the confluent engine's per-message tracking in C.

The extension is optional: where no C compiler is found the distribution installs without
it and the engine runs the same tracking in Python (``portable_kafka.speedups`` tells which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "portable_kafka._speedups",
            ["portable_kafka/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
