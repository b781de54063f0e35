/* Step records to msgpack bytes in C: the twin of `Packer.pack(record.to_wire())` (codec.py),
 * which stays the spec.
 *
 * Why C: a rank packs every step it runs on its tx thread, while the training thread waits for
 * the GIL. In Python that is a list built by `to_wire` and a pass through msgpack's packer,
 * 0.55 us a record on a quiet core and more inside a training loop; here it is one pass over the
 * record's fields.
 *
 * Same bytes: each value is written as msgpack-python's Packer(use_bin_type=True) writes it (the
 * smallest integer format, float64 for a float, str8 for strings from 32 to 255 bytes, fixarray
 * for short tuples), so a viewer cannot tell the two apart (tests/unit/test_pack_native.py
 * compares them on random records). Anything this file does not model (a record of another
 * type, a number of another type, an integer beyond int64, a string that is not UTF-8
 * encodable) makes `pack_steps` return None before it returns anything, and the caller packs the
 * whole batch in Python, which also decides what is unpackable.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* StepRecord's trailing optional fields (records.StepRecord.to_wire leaves them out while None) */
#define F_COMM 10
#define F_HELD 11
#define RECORD_FIELDS 12
#define MAX_DEPTH 4 /* a record's values nest one level (phases); deeper is not a record */

typedef struct {
    char *p;
    Py_ssize_t n;
    Py_ssize_t cap;
    char stack[256];
} Buf;

enum { OK = 0, DECLINE = 1, FAILED = -1 };

static int
reserve(Buf *b, Py_ssize_t extra)
{
    if (b->n + extra <= b->cap) {
        return OK;
    }
    Py_ssize_t cap = b->cap * 2 > b->n + extra ? b->cap * 2 : b->n + extra;
    char *p;
    if (b->p == b->stack) {
        p = PyMem_Malloc(cap);
        if (p != NULL) {
            memcpy(p, b->stack, b->n);
        }
    }
    else {
        p = PyMem_Realloc(b->p, cap);
    }
    if (p == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    b->p = p;
    b->cap = cap;
    return OK;
}

/* `n` bytes of `v`, big-endian, after the format byte `head`. */
static int
put_be(Buf *b, unsigned char head, unsigned long long v, int n)
{
    if (reserve(b, 1 + n) < 0) {
        return FAILED;
    }
    b->p[b->n++] = (char)head;
    for (int i = n - 1; i >= 0; i--) {
        b->p[b->n++] = (char)((v >> (8 * i)) & 0xff);
    }
    return OK;
}

/* An int in the smallest msgpack format, as msgpack's pack_long_long / pack_unsigned_long_long. */
static int
put_int(Buf *b, long long d)
{
    if (d < -(1LL << 5)) {
        if (d < -(1LL << 15)) {
            return d < -(1LL << 31) ? put_be(b, 0xd3, (unsigned long long)d, 8)
                                    : put_be(b, 0xd2, (unsigned long long)d & 0xffffffffULL, 4);
        }
        return d < -(1LL << 7) ? put_be(b, 0xd1, (unsigned long long)d & 0xffffULL, 2)
                               : put_be(b, 0xd0, (unsigned long long)d & 0xffULL, 1);
    }
    if (d < (1LL << 7)) { /* positive and negative fixint */
        return put_be(b, (unsigned char)(d & 0xff), 0, 0);
    }
    if (d < (1LL << 16)) {
        return d < (1LL << 8) ? put_be(b, 0xcc, (unsigned long long)d, 1)
                              : put_be(b, 0xcd, (unsigned long long)d, 2);
    }
    return d < (1LL << 32) ? put_be(b, 0xce, (unsigned long long)d, 4)
                           : put_be(b, 0xcf, (unsigned long long)d, 8);
}

/* A container's or a string's length header: `fix` for short ones, then the 8/16/32-bit forms
 * (`h8` 0 where the type has no 8-bit form). */
static int
put_len(Buf *b, Py_ssize_t n, unsigned char fix, Py_ssize_t fix_max, unsigned char h8,
        unsigned char h16, unsigned char h32)
{
    if (n <= fix_max) {
        return put_be(b, (unsigned char)(fix | n), 0, 0);
    }
    if (h8 != 0 && n < 256) {
        return put_be(b, h8, (unsigned long long)n, 1);
    }
    if (n < 65536) {
        return put_be(b, h16, (unsigned long long)n, 2);
    }
    if ((unsigned long long)n > 0xffffffffULL) {
        return DECLINE;
    }
    return put_be(b, h32, (unsigned long long)n, 4);
}

static int put_obj(Buf *b, PyObject *o, int depth);

static int
put_items(Buf *b, PyObject *const *items, Py_ssize_t n, int depth)
{
    int rc = put_len(b, n, 0x90, 15, 0, 0xdc, 0xdd);
    for (Py_ssize_t i = 0; rc == OK && i < n; i++) {
        rc = put_obj(b, items[i], depth + 1);
    }
    return rc;
}

static int
put_obj(Buf *b, PyObject *o, int depth)
{
    if (o == Py_None) {
        return put_be(b, 0xc0, 0, 0);
    }
    if (o == Py_True || o == Py_False) {
        return put_be(b, o == Py_True ? 0xc3 : 0xc2, 0, 0);
    }
    if (PyFloat_CheckExact(o)) {
        union {
            double d;
            unsigned long long u;
        } v;
        v.d = PyFloat_AS_DOUBLE(o);
        return put_be(b, 0xcb, v.u, 8);
    }
    if (PyLong_CheckExact(o)) {
        int overflow;
        long long d = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow != 0) {
            return DECLINE; /* uint64 and out-of-range ints: left to msgpack */
        }
        if (d == -1 && PyErr_Occurred()) {
            return FAILED;
        }
        return put_int(b, d);
    }
    if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            PyErr_Clear(); /* not encodable: msgpack raises, the caller counts it */
            return DECLINE;
        }
        int rc = put_len(b, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
        if (rc != OK || reserve(b, n) < 0) {
            return rc != OK ? rc : FAILED;
        }
        memcpy(b->p + b->n, s, n);
        b->n += n;
        return OK;
    }
    if (depth >= MAX_DEPTH) {
        return DECLINE;
    }
    if (PyTuple_CheckExact(o)) {
        return put_items(b, &PyTuple_GET_ITEM(o, 0), PyTuple_GET_SIZE(o), depth);
    }
    if (PyList_CheckExact(o)) {
        return put_items(b, &PyList_GET_ITEM(o, 0), PyList_GET_SIZE(o), depth);
    }
    return DECLINE;
}

/* One record as `[version, *fields]`, the trailing Nones left out as to_wire does. */
static int
put_record(Buf *b, PyObject *rec, PyObject *version)
{
    PyObject *const *f = &PyTuple_GET_ITEM(rec, 0);
    Py_ssize_t n = f[F_HELD] != Py_None ? RECORD_FIELDS : f[F_COMM] != Py_None ? F_HELD : F_COMM;
    int rc = put_len(b, n + 1, 0x90, 15, 0, 0xdc, 0xdd);
    if (rc == OK) {
        rc = put_obj(b, version, 1);
    }
    for (Py_ssize_t i = 0; rc == OK && i < n; i++) {
        rc = put_obj(b, f[i], 1);
    }
    return rc;
}

static PyObject *
pack_steps(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "pack_steps(records, record_type, version)");
        return NULL;
    }
    PyObject *records = args[0], *type = args[1], *version = args[2];
    if (!PyList_Check(records) && !PyTuple_Check(records)) {
        Py_RETURN_NONE;
    }
    PyObject *seq = PySequence_Fast(records, "records");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(count);
    Buf b = {.n = 0, .cap = sizeof(b.stack)};
    b.p = b.stack;
    int rc = out == NULL ? FAILED : OK;
    for (Py_ssize_t i = 0; rc == OK && i < count; i++) {
        PyObject *rec = items[i];
        if ((PyObject *)Py_TYPE(rec) != type || PyTuple_GET_SIZE(rec) != RECORD_FIELDS) {
            rc = DECLINE;
            break;
        }
        b.n = 0;
        rc = put_record(&b, rec, version);
        if (rc == OK) {
            PyObject *bytes = PyBytes_FromStringAndSize(b.p, b.n);
            if (bytes == NULL) {
                rc = FAILED;
                break;
            }
            PyList_SET_ITEM(out, i, bytes);
        }
    }
    if (b.p != b.stack) {
        PyMem_Free(b.p);
    }
    Py_DECREF(seq);
    if (rc != OK) {
        Py_XDECREF(out);
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"pack_steps", (PyCFunction)(void (*)(void))pack_steps, METH_FASTCALL,
     "pack_steps(records, record_type, version) -> list[bytes] | None\n\n"
     "Each record as msgpack bytes of [version, *fields] (trailing None fields left out as\n"
     "StepRecord.to_wire does); None when any record holds what this does not model."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pack_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "traceml.transport.wire._pack",
    .m_doc = "Step records to msgpack bytes (codec.py holds the Python reference).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__pack(void)
{
    PyObject *m = PyModule_Create(&pack_module);
    if (m == NULL) {
        return NULL;
    }
    PyObject *layout = Py_BuildValue("((si)(si))", "comm_wait_ms", F_COMM, "held_ms", F_HELD);
    int rc = layout == NULL ? -1 : PyModule_AddObjectRef(m, "RECORD_LAYOUT", layout);
    Py_XDECREF(layout);
    if (rc < 0 || PyModule_AddIntConstant(m, "RECORD_FIELDS", RECORD_FIELDS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
