"""Only the optional C parts; everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and TraceML uses the Python
references, which behave the same (the same records, the same floats), a few µs a step slower:
the step timer and wrappers (traceml.instrument.timer, hooks), the folds (traceml.analysis.native)
and the step records' packer (traceml.transport.wire.codec).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceml.instrument._native",
            ["traceml/instrument/_native.c"],
            optional=True,
        ),
        Extension(
            "traceml.analysis._fold",
            ["traceml/analysis/_fold.c"],
            optional=True,
        ),
        Extension(
            "traceml.transport.wire._pack",
            ["traceml/transport/wire/_pack.c"],
            optional=True,
        ),
    ]
)
