"""The one C extension; everything else about the package is in pyproject.toml.

`record()` of routing/chain/events.py in C: an event then costs less than calling an
empty Python function (the Python version, kept as the reference and the fallback, costs
half as much again). Optional: where it cannot be compiled, the package installs without it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("routing.chain._fastrecord", ["routing/chain/_fastrecord.c"], optional=True)
    ]
)
