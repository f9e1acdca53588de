/* `record(step, **fields)` of routing/chain/events.py, in C.

   The Python function is the reference and the fallback; this one does the same thing
   without a Python frame, because a frame and a kwargs call cost more than the rest of
   the event (the chain is recorded on every request, so its cost must be noise). It
   reads the same ContextVar, appends the same plain tuple
   (perf_counter seconds, part, step, fields, None), and hands an event past the bound
   to the log's `past_bound`, exactly as the Python version does. Its clock is
   CLOCK_MONOTONIC converted as CPython converts it, so its times are `time.perf_counter()`
   times (the request's start is read in Python). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

static PyObject *scope_var = NULL;     /* the ContextVar holding (entries, limit, log, part) */
static PyObject *past_bound_name = NULL;

static PyObject *
perf_counter_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int64_t ns = (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
    /* As CPython's _PyTime_AsSecondsDouble: whole seconds exactly, else ns / 1e9. */
    volatile double seconds;
    if (ns % 1000000000 == 0) {
        seconds = (double)(ns / 1000000000);
    }
    else {
        seconds = (double)ns;
        seconds /= 1e9;
    }
    return PyFloat_FromDouble(seconds);
}

static PyObject *
fields_dict(PyObject *const *values, PyObject *kwnames)
{
    PyObject *fields = PyDict_New();
    if (fields == NULL || kwnames == NULL) {
        return fields;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyDict_SetItem(fields, PyTuple_GET_ITEM(kwnames, i), values[i]) < 0) {
            Py_DECREF(fields);
            return NULL;
        }
    }
    return fields;
}

static PyObject *
record(PyObject *module, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError,
                     "record() takes the step as its one positional argument (%zd given)", nargs);
        return NULL;
    }
    if (scope_var == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "record(): bind() was not called");
        return NULL;
    }
    PyObject *scope = NULL;
    if (PyContextVar_Get(scope_var, NULL, &scope) < 0) {
        return NULL;
    }
    if (scope == NULL || !PyTuple_CheckExact(scope) || PyTuple_GET_SIZE(scope) != 4) {
        Py_XDECREF(scope);
        PyErr_SetString(PyExc_TypeError, "record(): the route scope is not (entries, limit, log, part)");
        return NULL;
    }
    PyObject *entries = PyTuple_GET_ITEM(scope, 0);
    PyObject *log = PyTuple_GET_ITEM(scope, 2);
    Py_ssize_t limit = PyLong_AsSsize_t(PyTuple_GET_ITEM(scope, 1));
    if ((limit == -1 && PyErr_Occurred()) || !PyList_Check(entries)) {
        Py_DECREF(scope);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "record(): the scope's entries are not a list");
        }
        return NULL;
    }
    PyObject *result = NULL;
    if (PyList_GET_SIZE(entries) < limit) {
        PyObject *fields = fields_dict(args + 1, kwnames);
        PyObject *at = fields ? perf_counter_seconds() : NULL;
        PyObject *entry = at ? PyTuple_Pack(5, at, PyTuple_GET_ITEM(scope, 3), args[0], fields,
                                            Py_None)
                             : NULL;
        if (entry != NULL && PyList_Append(entries, entry) == 0) {
            result = Py_NewRef(Py_None);
        }
        Py_XDECREF(entry);
        Py_XDECREF(at);
        Py_XDECREF(fields);
    }
    else if (log != Py_None) {
        PyObject *fields = fields_dict(args + 1, kwnames);
        if (fields != NULL) {
            result = PyObject_CallMethodObjArgs(log, past_bound_name, args[0],
                                                PyTuple_GET_ITEM(scope, 3), fields, NULL);
            Py_DECREF(fields);
        }
    }
    else {
        result = Py_NewRef(Py_None);  /* outside a request: nothing to record */
    }
    Py_DECREF(scope);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

static PyObject *
bind(PyObject *module, PyObject *var)
{
    if (!PyContextVar_CheckExact(var)) {
        PyErr_SetString(PyExc_TypeError, "bind() takes the route scope's ContextVar");
        return NULL;
    }
    Py_XSETREF(scope_var, Py_NewRef(var));
    Py_RETURN_NONE;
}

static PyObject *
perf_counter(PyObject *module, PyObject *unused)
{
    return perf_counter_seconds();
}

static PyMethodDef methods[] = {
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL | METH_KEYWORDS,
     "record(step, **fields): append one event to the current request's chain."},
    {"bind", bind, METH_O, "bind(scope): the ContextVar record() reads."},
    {"perf_counter", perf_counter, METH_NOARGS, "The clock record() reads, in seconds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastrecord", "record() of routing.chain.events, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__fastrecord(void)
{
    past_bound_name = PyUnicode_InternFromString("past_bound");
    if (past_bound_name == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
