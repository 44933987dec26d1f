"""The optional C extension calibrate_cli._ckernel (the summary pass's two hot loops; the rest of the
project's metadata is in pyproject.toml). optional=True: without a C compiler the package still
installs, and the summary pass uses numba (extra [fast]) or numpy, with the same numbers."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "calibrate_cli._ckernel",
            ["calibrate_cli/_ckernel.c"],
            optional=True,
            # no fast-math, and no a*b + c contracted into an FMA: the results must equal numpy's bit for bit
            extra_compile_args=["-O2", "-ffp-contract=off", "-std=c99"],
        )
    ],
)
