"""The optional C extension calibrate_cli.engine._ckernel (the "fused" engine: the summary pass's row
loop and a few passes over samples; the rest of the project's metadata is in pyproject.toml).
optional=True: without a C compiler the package still installs and every pass runs in numpy (the
"numpy" engine), with the same numbers within tests/libm.py's contract."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "calibrate_cli.engine._ckernel",
            ["calibrate_cli/engine/_ckernel.c"],
            optional=True,
            # plain -O2, no -ffast-math: fast-math would let the compiler reassociate the float64 sums (their
            # order then depends on the compiler, not the source) and assume no NaN/inf (the -inf of a log 0
            # is handled); a multiply-add contracted into an FMA only moves results by an ulp (the contract)
            # -fno-trapping-math: no floating-point operation traps, so a loop with a choice (p < edge) can be
            # vectorised (if-converted); it changes no value (no reassociation, no other rounding)
            # -falign-loops=32: every loop starts on a 32-byte boundary, so an edit elsewhere in the file that
            # moves the row loop does not move its speed (5-8 % apart by where it landed; docs/performance.md)
            extra_compile_args=["-O2", "-std=c99", "-fopenmp-simd", "-fno-trapping-math", "-falign-loops=32",
                                "-DCALIB_VECTOR_EXP"],
            libraries=["m"],  # glibc: libm.so pulls libmvec (the vector exp) in as needed
        ),
        # a memory-mapped input truncated mid-read: one line naming it and exit 2, not SIGBUS's 135
        # (calibrate_cli/data/pages.py: watch_mapped); optional as well: without it, the 135 stays
        Extension("calibrate_cli.data._sigbus", ["calibrate_cli/data/_sigbus.c"], optional=True, extra_compile_args=["-O2"]),
    ],
)
