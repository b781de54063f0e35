/* Step records to and from msgpack bytes in C: the twins of `Packer.pack(record.to_wire())` and
 * of `decode_steps`' fast path (codec.py), which stay the spec.
 *
 * Why C: a rank packs every step it runs on its tx thread, while the training thread waits for
 * the GIL: in Python a list built by `to_wire` and a pass through msgpack's packer, 0.55 us a
 * record on a quiet core and more inside a training loop. The job collector and every viewer
 * decode every record of every rank: 2.6 us a record in Python (msgpack's objects, then the
 * StepRecord checked and built from them). Here each is one pass over the bytes or the fields.
 *
 * Same bytes: `pack_steps` writes each value as msgpack-python's Packer(use_bin_type=True) does
 * (the smallest integer format, float64 for a float, str8 for strings from 32 to 255 bytes,
 * fixarray for short tuples), so a viewer cannot tell the two apart. Same records:
 * `unpack_steps` builds what the Python fast path builds (ints, floats, None, a tuple of
 * phases, "host" or "cuda"). tests/unit/test_pack_native.py compares both ways on random
 * records. Anything this file does not model (a record of another type, a value of another
 * type, an integer beyond int64, a string that is not UTF-8 encodable; on the way in, a float32,
 * an int where a float belongs, NaN or infinity, any other shape) makes the call return None
 * before it returns anything, and the caller does the whole batch in Python, which also decides
 * what is unpackable or malformed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
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

/* Takes an object that holds only numbers, strings, None and tuples of them out of the garbage
 * collector's care: it can be in no cycle, and tracked, every record a store keeps moves up the
 * generations and brings the next full collection closer (as _native.c's records). */
static void
untrack(PyObject *obj)
{
    if (PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
}

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

/* ---- decoding ------------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cursor;

static PyObject *HOST; /* "host" and "cuda": every decoded record shares these two strings */
static PyObject *CUDA;

/* The next `n` bytes as a big-endian unsigned number; DECLINE past the end. */
static int
take_be(Cursor *c, int n, unsigned long long *out)
{
    if (c->end - c->p < n) {
        return DECLINE;
    }
    unsigned long long v = 0;
    for (int i = 0; i < n; i++) {
        v = (v << 8) | c->p[i];
    }
    c->p += n;
    *out = v;
    return OK;
}

static int
take_array(Cursor *c, Py_ssize_t *n)
{
    unsigned long long v;
    if (c->p >= c->end) {
        return DECLINE;
    }
    unsigned char b = *c->p++;
    if ((b & 0xf0) == 0x90) {
        *n = b & 0x0f;
        return OK;
    }
    if ((b != 0xdc && b != 0xdd) || take_be(c, b == 0xdc ? 2 : 4, &v) != OK) {
        return DECLINE;
    }
    *n = (Py_ssize_t)v;
    return OK;
}

/* Any msgpack integer, as msgpack-python gives it. */
static int
take_int(Cursor *c, long long *out, PyObject **obj)
{
    unsigned long long v;
    if (c->p >= c->end) {
        return DECLINE;
    }
    unsigned char b = *c->p++;
    long long d;
    if (b <= 0x7f || b >= 0xe0) { /* positive and negative fixint */
        d = b <= 0x7f ? b : (signed char)b;
    }
    else if (b >= 0xcc && b <= 0xcf) { /* uint 8 .. 64 */
        if (take_be(c, 1 << (b - 0xcc), &v) != OK) {
            return DECLINE;
        }
        if (v > (unsigned long long)LLONG_MAX) {
            return DECLINE; /* msgpack-python's, as packing leaves it */
        }
        d = (long long)v;
    }
    else if (b >= 0xd0 && b <= 0xd3) { /* int 8 .. 64 */
        int n = 1 << (b - 0xd0);
        if (take_be(c, n, &v) != OK) {
            return DECLINE;
        }
        if (n < 8 && (v >> (8 * n - 1)) & 1) {
            v |= ~0ULL << (8 * n); /* sign-extend */
        }
        d = (long long)v;
    }
    else {
        return DECLINE;
    }
    *out = d;
    if (obj != NULL && (*obj = PyLong_FromLongLong(d)) == NULL) {
        return FAILED;
    }
    return OK;
}

/* A float64 that is finite, or nil where `nil_ok`; anything else declines (float32, an int,
 * NaN and infinity, which the Python path turns into None or refuses). */
static int
take_float(Cursor *c, int nil_ok, PyObject **obj)
{
    unsigned long long v;
    if (c->p >= c->end) {
        return DECLINE;
    }
    if (*c->p == 0xc0 && nil_ok) {
        c->p++;
        *obj = Py_NewRef(Py_None);
        return OK;
    }
    if (*c->p != 0xcb) {
        return DECLINE;
    }
    c->p++;
    if (take_be(c, 8, &v) != OK) {
        return DECLINE;
    }
    union {
        unsigned long long u;
        double d;
    } u;
    u.u = v;
    if (!isfinite(u.d)) {
        return DECLINE;
    }
    *obj = PyFloat_FromDouble(u.d);
    return *obj == NULL ? FAILED : OK;
}

static int
take_clock(Cursor *c, PyObject **obj)
{
    if (c->end - c->p < 5 || c->p[0] != 0xa4) {
        return DECLINE;
    }
    PyObject *clock = memcmp(c->p + 1, "host", 4) == 0   ? HOST
                      : memcmp(c->p + 1, "cuda", 4) == 0 ? CUDA
                                                         : NULL;
    if (clock == NULL) {
        return DECLINE;
    }
    c->p += 5;
    *obj = Py_NewRef(clock);
    return OK;
}

static int
take_phases(Cursor *c, Py_ssize_t n_phases, PyObject **obj)
{
    Py_ssize_t n;
    if (take_array(c, &n) != OK || n != n_phases) {
        return DECLINE;
    }
    PyObject *phases = PyTuple_New(n);
    if (phases == NULL) {
        return FAILED;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v;
        int rc = take_float(c, 1, &v);
        if (rc != OK) {
            Py_DECREF(phases);
            return rc;
        }
        PyTuple_SET_ITEM(phases, i, v);
    }
    untrack(phases);
    *obj = phases;
    return OK;
}

/* One record, [version, rank, step, wall_start, step_ms, phases, clock, 4 memory fields,
 * comm?, held?], into a new `type` instance with the missing trailing fields None. */
static int
take_record(Cursor *c, PyTypeObject *type, long long version, Py_ssize_t n_phases, PyObject **out)
{
    Py_ssize_t n;
    long long v;
    if (take_array(c, &n) != OK || n < F_COMM + 1 || n > RECORD_FIELDS + 1) {
        return DECLINE;
    }
    int rc = take_int(c, &v, NULL);
    if (rc != OK || v != version) {
        return DECLINE;
    }
    PyObject *f[RECORD_FIELDS] = {NULL};
    rc = take_int(c, &v, &f[0]);
    if (rc == OK) {
        rc = take_int(c, &v, &f[1]);
    }
    if (rc == OK) {
        rc = take_float(c, 0, &f[2]);
    }
    if (rc == OK) {
        rc = take_float(c, 0, &f[3]);
    }
    if (rc == OK) {
        rc = take_phases(c, n_phases, &f[4]);
    }
    if (rc == OK) {
        rc = take_clock(c, &f[5]);
    }
    for (Py_ssize_t i = 6; rc == OK && i < RECORD_FIELDS; i++) {
        if (i < n - 1) {
            rc = take_float(c, 1, &f[i]);
        }
        else {
            f[i] = Py_NewRef(Py_None);
        }
    }
    PyObject *rec = rc == OK ? type->tp_alloc(type, RECORD_FIELDS) : NULL;
    if (rec == NULL) {
        for (int i = 0; i < RECORD_FIELDS; i++) {
            Py_XDECREF(f[i]);
        }
        return rc == OK ? FAILED : rc;
    }
    for (int i = 0; i < RECORD_FIELDS; i++) {
        PyTuple_SET_ITEM(rec, i, f[i]);
    }
    untrack(rec);
    *out = rec;
    return OK;
}

static PyObject *
unpack_steps(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "unpack_steps(body, record_type, version, n_phases)");
        return NULL;
    }
    long long version = PyLong_AsLongLong(args[2]);
    Py_ssize_t n_phases = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Cursor c = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    Py_ssize_t n;
    PyObject *out = NULL;
    /* Each record takes at least 16 bytes: a count beyond that is not a batch of records. */
    int rc = take_array(&c, &n);
    if (rc == OK && n > (c.end - c.p) / 16 + 1) {
        rc = DECLINE;
    }
    if (rc == OK && (out = PyTuple_New(n)) == NULL) {
        rc = FAILED;
    }
    for (Py_ssize_t i = 0; rc == OK && i < n; i++) {
        PyObject *rec;
        rc = take_record(&c, (PyTypeObject *)args[1], version, n_phases, &rec);
        if (rc == OK) {
            PyTuple_SET_ITEM(out, i, rec);
        }
    }
    if (rc == OK && c.p != c.end) {
        rc = DECLINE; /* trailing bytes: not one msgpack array */
    }
    PyBuffer_Release(&view);
    if (rc != OK) {
        Py_XDECREF(out);
        if (rc == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    untrack(out);
    return out;
}

static PyMethodDef methods[] = {
    {"pack_steps", (PyCFunction)(void (*)(void))pack_steps, METH_FASTCALL,
     "pack_steps(records, record_type, version) -> list[bytes] | None\n\n"
     "Each record as msgpack bytes of [version, *fields] (trailing None fields left out as\n"
     "StepRecord.to_wire does); None when any record holds what this does not model."},
    {"unpack_steps", (PyCFunction)(void (*)(void))unpack_steps, METH_FASTCALL,
     "unpack_steps(body, record_type, version, n_phases) -> tuple | None\n\n"
     "The records of a msgpack array of step records, as decode_steps' fast path builds them;\n"
     "None when the body holds what this does not model."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pack_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "traceml.transport.wire._pack",
    .m_doc = "Step records to and from msgpack bytes (codec.py holds the Python references).",
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
    HOST = PyUnicode_InternFromString("host");
    CUDA = PyUnicode_InternFromString("cuda");
    if (HOST == NULL || CUDA == NULL) {
        Py_DECREF(m);
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
