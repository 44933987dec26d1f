"""numpy's float64 ``exp`` and ``log`` made 1 ulp off on a share of arguments: a stand-in for a CPU on
which numpy's own SIMD kernels (AVX-512) differ from the C library's in the last bit, where the C
extension keeps calling the C library's.

``CALIB_TEST_PERTURB_LIBM=0.05 python -m pytest -q`` (root conftest.py) builds a small C extension
with the C compiler and numpy's headers and replaces the float64 loops of ``np.exp`` and ``np.log``
through ``PyUFunc_ReplaceLoopBySignature``: each result moves one ulp up on the given share of
arguments (chosen by a hash of the argument's bits, so the same argument always moves; exact results,
exp 0 = 1 and log 1 = 0, stay exact, as in every libm). A suite that
asserts bits only where the arithmetic guarantees them passes with any share.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import math
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t threshold;  /* moved when the argument's hash is below it */

static double nudge(double x, double v) {  /* exact results (exp 0 = 1, log 1 = 0) stay exact */
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits ^= bits >> 33; bits *= 0xff51afd7ed558ccdULL; bits ^= bits >> 33;
    bits *= 0xc4ceb9fe1a85ec53ULL; bits ^= bits >> 33;
    if (bits < threshold && isfinite(v) && v != 0.0 && v != 1.0) return nextafter(v, INFINITY);
    return v;
}

static void exp_loop(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
    for (npy_intp i = 0; i < dims[0]; i++) {
        double x = *(double *)(args[0] + i * steps[0]);
        *(double *)(args[1] + i * steps[1]) = nudge(x, exp(x));
    }
}

static void log_loop(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {
    for (npy_intp i = 0; i < dims[0]; i++) {
        double x = *(double *)(args[0] + i * steps[0]);
        *(double *)(args[1] + i * steps[1]) = nudge(x, log(x));
    }
}

static int replace(PyObject *numpy, const char *name, PyUFuncGenericFunction loop) {
    PyObject *ufunc = PyObject_GetAttrString(numpy, name);
    if (ufunc == NULL) return -1;
    int signature[2] = {NPY_DOUBLE, NPY_DOUBLE};
    PyUFuncGenericFunction old = NULL;
    int rc = PyUFunc_ReplaceLoopBySignature((PyUFuncObject *)ufunc, loop, signature, &old);
    Py_DECREF(ufunc);
    if (rc != 0) PyErr_Format(PyExc_RuntimeError, "no float64 loop of numpy.%s to replace", name);
    return rc;
}

static PyObject *install(PyObject *self, PyObject *arg) {
    double share = PyFloat_AsDouble(arg);
    if (share == -1.0 && PyErr_Occurred()) return NULL;
    threshold = share >= 1.0 ? UINT64_MAX : (uint64_t)(share * 18446744073709551616.0);
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) return NULL;
    int rc = replace(numpy, "exp", exp_loop) || replace(numpy, "log", log_loop);
    Py_DECREF(numpy);
    if (rc) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"install", install, METH_O, "perturb numpy's float64 exp and log"}, {NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_perturbed_libm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__perturbed_libm(void) {
    import_array();
    import_umath();
    return PyModule_Create(&module);
}
"""


def install(share: float) -> None:
    """Build (once per source and interpreter, in the temporary folder) and install the perturbed loops;
    then check that ``np.exp`` moved on about ``share`` of 20,000 arguments."""
    import numpy as np

    key = hashlib.sha256((SOURCE + sys.version + np.__version__).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"calib-perturbed-libm-{key}"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    library = folder / f"_perturbed_libm{suffix}"
    if not library.exists():
        folder.mkdir(exist_ok=True)
        (folder / "perturbed_libm.c").write_text(SOURCE)
        build = library.with_suffix(".tmp")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"],
                        "-I", np.get_include(), str(folder / "perturbed_libm.c"), "-o", str(build), "-lm"],
                       check=True)
        build.replace(library)
    spec = importlib.util.spec_from_file_location("_perturbed_libm", library)
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    extension.install(float(share))
    x = np.random.default_rng(0).uniform(-30, 30, 20_000)
    moved = np.mean(np.exp(x) != [math.exp(v) for v in x])
    if abs(moved - share) > 0.02 + share / 5:
        raise RuntimeError(f"perturbed_libm: np.exp moved on {moved:.3f} of arguments, not about {share}")
