/* calibrate_cli._sigbus: one line naming the file, exit 2, when a memory-mapped input is truncated
 * by another process while calib reads it (calibrate_cli/pages.py: watch_mapped).
 *
 * A read from a page of a mapping beyond the end of its (now shorter) file raises SIGBUS. Python
 * cannot handle it (its handlers run between bytecodes, after the faulting instruction would have
 * run again: the process loops or dies with 135 and no message). This handler runs at the fault: it
 * looks the faulting address up in the ranges Python registered (each with its line, formatted in
 * advance), writes that line to stderr and ends the process with exit code 2 (write and _exit only:
 * both async-signal-safe). A fault outside every range is not calib's doing to explain: the handler
 * that was there before (Python's faulthandler, or the default: 135) gets it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__unix__) || defined(__APPLE__)
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define MAX_RANGES 64
#define MAX_LINE 1024

typedef struct {
    volatile uintptr_t start;
    volatile uintptr_t end; /* 0: the slot is free */
    char line[MAX_LINE];
    volatile size_t len;
} range_t;

static range_t ranges[MAX_RANGES];
static struct sigaction previous;
static int installed = 0;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    uintptr_t address = (uintptr_t)info->si_addr;
    for (int i = 0; i < MAX_RANGES; i++) {
        uintptr_t end = ranges[i].end;
        if (end && address >= ranges[i].start && address < end) {
            ssize_t ignored = write(2, ranges[i].line, ranges[i].len);
            (void)ignored;
            _exit(2);
        }
    }
    /* not a watched mapping: what would have happened without this handler */
    sigaction(SIGBUS, &previous, NULL);
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    raise(SIGBUS); /* the default action: the faulting access is retried on return, and kills */
}

static int install(void)
{
    if (installed)
        return 0;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    installed = 1;
    return 0;
}

/* watch(start, length, line): a fault in [start, start + length) writes line (bytes) and exits 2 */
static PyObject *watch(PyObject *self, PyObject *args)
{
    unsigned long long start, length;
    const char *line;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "KKy#", &start, &length, &line, &len))
        return NULL;
    if (install() != 0)
        return NULL;
    if (len > MAX_LINE)
        len = MAX_LINE;
    for (int i = 0; i < MAX_RANGES; i++) {
        if (ranges[i].end == 0) {
            ranges[i].end = 0; /* stays free while it is filled */
            memcpy(ranges[i].line, line, (size_t)len);
            ranges[i].len = (size_t)len;
            ranges[i].start = (uintptr_t)start;
            ranges[i].end = (uintptr_t)(start + length);
            Py_RETURN_TRUE;
        }
    }
    Py_RETURN_FALSE; /* every slot taken: this mapping is not watched */
}

/* unwatch(start): forget the range that starts at start */
static PyObject *unwatch(PyObject *self, PyObject *args)
{
    unsigned long long start;
    if (!PyArg_ParseTuple(args, "K", &start))
        return NULL;
    for (int i = 0; i < MAX_RANGES; i++) {
        if (ranges[i].end && ranges[i].start == (uintptr_t)start) {
            ranges[i].end = 0;
            break;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"watch", watch, METH_VARARGS, "watch(start, length, line): on SIGBUS in the range, write line to stderr, exit 2."},
    {"unwatch", unwatch, METH_VARARGS, "unwatch(start): forget the range starting at start."},
    {NULL, NULL, 0, NULL},
};
#else
static PyMethodDef methods[] = {{NULL, NULL, 0, NULL}};
#endif

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sigbus", "One line and exit 2 when a memory-mapped input is truncated (SIGBUS).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__sigbus(void) { return PyModule_Create(&module); }
