"""Only the optional C step timer; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and TraceML uses the
pure-Python timer (traceml.instrument.timer), which behaves the same, a few µs a step slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceml.instrument._native",
            ["traceml/instrument/_native.c"],
            optional=True,
        )
    ]
)
