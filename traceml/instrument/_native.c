/* TraceML's per-step hot paths in C, each the twin of a Python reference that stays the spec:
 *
 *   StepTimer     timer.StepTimer, method for method (the training thread, every boundary);
 *   RawStep       timer.RawStep, the step StepTimer emits, as C numbers;
 *   Timed, Edge   the wrappers and optimizer hooks of hooks.Hooks (no Python frame per call);
 *   Roots         forward.make_edges's enter and leave of a root module call;
 *   Step          api.StepContext, what `trace_step` returns;
 *   host_records  resolve.host_records (the tx thread, every step).
 *
 * Why C: measured inside a real 0.15 ms loop, each Python-level call costs about 1 us (the
 * interpreter's caches are cold after torch's own work), and auto mode makes eight timer calls
 * and four wrapper frames a step: 16 us with the Python timer, 7-8 with this one. Tests run the
 * same sequences through both; TraceML uses the Python ones whenever this module is not built
 * (no compiler at install) or TRACEML_C_TIMER=0 (see timer.new_timer).
 *
 * The clock is CPython's own perf counter, so every timestamp equals what time.perf_counter_ns()
 * returns on any other thread of the process (the tx thread compares them with its own reads).
 * On Linux that counter is CLOCK_MONOTONIC, read here directly: CPython's wrapper around it
 * (overflow checks, a timespec conversion) was a tenth of each boundary's instructions and its
 * code one more set of cache lines for torch's work to evict between two boundaries.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#if defined(__linux__)
#include <time.h>
#endif

/* Layout hints for the boundaries' code. Between two boundaries torch's work evicts it from the
 * first-level instruction cache, so each boundary fetches again every cache line its path runs
 * through (cachegrind: timer_begin alone missed 24 lines a step before these hints, 8 after).
 * The error, CUDA and test-clock paths are kept out of those lines: a cold function goes to a
 * section of its own, an unlikely branch after the function's hot path. */
#if defined(__GNUC__) || defined(__clang__)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define COLD __attribute__((cold, noinline))
#else
#define UNLIKELY(x) (x)
#define COLD
#endif

#define N_PHASES 7
#define BETWEEN 1
#define OTHER 6
#define RSS_INTERVAL_NS 10000000LL
#define RAW_FIELDS 9
/* RawSteps kept for reuse (~600 KB): as many as one fold hands back. While nobody listens the tx
 * thread folds once a second, or sooner once a quarter of the 16,384-step buffer is queued, so a
 * fold takes at most 4,096 steps (a second at 0.25 ms a step). With 2,048 the pool ran dry each
 * second on a loop faster than 0.5 ms a step: the training thread allocated the rest of the
 * second's RawSteps anew, and the tx thread freed as many, cold, a second later. */
#define POOL_CAP 4096

/* ---- RawStep: what the training thread hands to the tx thread for one step -------------- */

/* The C twin of timer.RawStep (a NamedTuple): the same fields, read by name or by index in the
 * same order, equal to the tuple of the same values, but plain C numbers. As a tuple it cost the
 * training thread ten ints a step (start, end, each phase's ns: two or three 30-bit digits each,
 * so none of CPython's cached small ints) and the tx thread reading and freeing them. It holds
 * no reference that could close a cycle (None, or tuples of floats and CUDA events), so the
 * garbage collector neither tracks it nor counts it. */
typedef struct {
    PyObject_HEAD
    long long step;
    long long start_ns;
    long long end_ns;
    long long phase_ns[N_PHASES];
    long long seen;
    long long rss_pages;
    PyObject *marks;      /* None or a tuple of (label, event) */
    PyObject *device_mem; /* None or (allocated, reserved, peak) MB */
    long long comm_ns;
} RawStep;

static PyTypeObject RawStepType;

static PyObject *
phase_tuple(const long long *ns)
{
    PyObject *out = PyTuple_New(N_PHASES);
    for (int i = 0; out != NULL && i < N_PHASES; i++) {
        PyObject *v = PyLong_FromLongLong(ns[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *
RawStep_get_phase_ns(RawStep *self, void *Py_UNUSED(closure))
{
    return phase_tuple(self->phase_ns);
}

static Py_ssize_t
RawStep_length(PyObject *Py_UNUSED(self))
{
    return RAW_FIELDS;
}

/* Field i in timer.RawStep's order. */
static PyObject *
RawStep_item(RawStep *self, Py_ssize_t i)
{
    switch (i) {
    case 0: return PyLong_FromLongLong(self->step);
    case 1: return PyLong_FromLongLong(self->start_ns);
    case 2: return PyLong_FromLongLong(self->end_ns);
    case 3: return phase_tuple(self->phase_ns);
    case 4: return PyLong_FromLongLong(self->seen);
    case 5: return PyLong_FromLongLong(self->rss_pages);
    case 6: return Py_NewRef(self->marks);
    case 7: return Py_NewRef(self->device_mem);
    case 8: return PyLong_FromLongLong(self->comm_ns);
    default:
        PyErr_SetString(PyExc_IndexError, "RawStep index out of range");
        return NULL;
    }
}

/* The fields as a plain tuple (through RawStep_item): what comparisons and the repr work on. */
static PyObject *
RawStep_astuple(RawStep *self)
{
    return PySequence_Tuple((PyObject *)self);
}

/* Equal to another RawStep or a tuple (timer.RawStep among them) of the same values. */
static PyObject *
RawStep_richcompare(PyObject *a, PyObject *b, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(a, &RawStepType) ||
        !(PyTuple_Check(b) || PyObject_TypeCheck(b, &RawStepType))) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *left = RawStep_astuple((RawStep *)a);
    PyObject *right = PyTuple_Check(b) ? Py_NewRef(b) : RawStep_astuple((RawStep *)b);
    PyObject *r = left != NULL && right != NULL ? PyObject_RichCompare(left, right, op) : NULL;
    Py_XDECREF(left);
    Py_XDECREF(right);
    return r;
}

static PyObject *
RawStep_repr(RawStep *self)
{
    PyObject *fields = RawStep_astuple(self);
    if (fields == NULL) {
        return NULL;
    }
    PyObject *r = PyUnicode_FromFormat("RawStep%R", fields);
    Py_DECREF(fields);
    return r;
}

static void
RawStep_dealloc(RawStep *self)
{
    Py_XDECREF(self->marks);
    Py_XDECREF(self->device_mem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef RawStep_members[] = {
    {"step", T_LONGLONG, offsetof(RawStep, step), READONLY, NULL},
    {"start_ns", T_LONGLONG, offsetof(RawStep, start_ns), READONLY, NULL},
    {"end_ns", T_LONGLONG, offsetof(RawStep, end_ns), READONLY, NULL},
    {"seen", T_LONGLONG, offsetof(RawStep, seen), READONLY, NULL},
    {"rss_pages", T_LONGLONG, offsetof(RawStep, rss_pages), READONLY, NULL},
    {"marks", T_OBJECT, offsetof(RawStep, marks), READONLY, NULL},
    {"device_mem", T_OBJECT, offsetof(RawStep, device_mem), READONLY, NULL},
    {"comm_ns", T_LONGLONG, offsetof(RawStep, comm_ns), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef RawStep_getset[] = {
    {"phase_ns", (getter)RawStep_get_phase_ns, NULL, "ns per phase, a tuple of ints.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RawStep_as_sequence = {
    .sq_length = RawStep_length,
    .sq_item = (ssizeargfunc)RawStep_item,
};

static PyTypeObject RawStepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceml.instrument._native.RawStep",
    .tp_doc = "One step as the C timer emits it: timer.RawStep's fields, as C numbers.",
    .tp_basicsize = sizeof(RawStep),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)RawStep_dealloc,
    .tp_repr = (reprfunc)RawStep_repr,
    .tp_richcompare = RawStep_richcompare,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_as_sequence = &RawStep_as_sequence,
    .tp_members = RawStep_members,
    .tp_getset = RawStep_getset,
};

typedef struct {
    PyObject_HEAD
    PyObject *out_append; /* the output deque's bound append */
    PyObject *clock;      /* NULL: CPython's perf counter, read directly */
    PyObject *read_rss;   /* NULL or a callable returning resident pages */
    PyObject *mark;       /* NULL or a callable returning a marker (CUDA event) */
    PyObject *read_device;
    PyObject *comm;
    PyObject *marks;      /* NULL or a list of (label, marker) of the current step */
    long long acc[N_PHASES];
    int *stack;
    Py_ssize_t depth;
    Py_ssize_t cap;
    int label;
    long long t;          /* start of the current segment; -1 until the first event */
    long long step_t0;
    long long last_rss_ns;
    char inside;
    long long seen;
    long long step;
    PyObject **pool;      /* RawSteps handed back by the tx thread (recycle) */
    Py_ssize_t pool_n;
    PyObject *beat;       /* NULL or the tx worker's beat(t): the periodic work, inline */
    long long beat_due;   /* the clock's ns at which a step's end calls beat */
    long long *ring;      /* NULL, or the step ring's words (use_ring): steps go there */
    long long ring_slots;
    Py_buffer ring_view;  /* the ring's buffer, held while in use */
    long long *label_out; /* where the open phase is also written: the ring's, or label_sink */
    long long label_sink;
} Timer;

/* The step ring (TRACEML_BEATS=process, instrument/ship.py): a shared mapping that the beats
 * process reads while this one writes, int64 words. RING_HEADER words first: the steps written
 * so far (stored last, with release order, so a reader that sees n sees n whole steps), the
 * slots, the open phase (the label, written at each boundary: where a stalled rank is), then
 * spare words; then `slots` steps of STEP_WORDS words each, step n in slot n % slots. A full
 * ring overwrites its oldest steps; the reader finds them gone (ring_read) and counts them
 * dropped from the gap in step numbers. The writer never waits. */
#define RING_HEADER 8
#define RING_WRITTEN 0
#define RING_SLOTS 1
#define RING_LABEL 2
/* A step in the ring and on the wire: step, start_ns, end_ns, the phases' ns, seen, rss_pages,
 * comm_ns. */
#define STEP_WORDS (3 + N_PHASES + 3)

/* The slots of the ring in `words` (`len` bytes), or -1 with ValueError set (from `who`) when it
 * is not one: misaligned, no slots in its header, or more than its size holds. */
static long long
ring_slots_of(const long long *words, Py_ssize_t len, const char *who)
{
    long long slots = len >= RING_HEADER * 8 ? words[RING_SLOTS] : 0;
    if (((uintptr_t)words % 8) != 0 || slots <= 0 ||
        slots > (len / 8 - RING_HEADER) / STEP_WORDS) {
        PyErr_Format(PyExc_ValueError, "%s(): not a ring (header, slots) of this size", who);
        return -1;
    }
    return slots;
}

static inline void
set_label(Timer *self, int label)
{
    self->label = label;
    *self->label_out = label;
}

/* The clock a test gave the timer (StepTimer(clock=...)). */
COLD static int
read_given_clock(Timer *self, long long *out)
{
    PyObject *r = PyObject_CallNoArgs(self->clock);
    if (r == NULL) {
        return -1;
    }
    *out = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
read_clock(Timer *self, long long *out)
{
    if (UNLIKELY(self->clock != NULL)) {
        return read_given_clock(self, out);
    }
#if defined(__linux__) && defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* what time.perf_counter_ns() reads on Linux */
    *out = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
#elif PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    PyTime_PerfCounterRaw(&t);
    *out = (long long)t;
#else
    *out = (long long)_PyTime_GetPerfCounter();
#endif
    return 0;
}

/* Appends (label, mark()) to the step's marks (CUDA path only). */
static int
add_mark(Timer *self, int label)
{
    if (self->marks == NULL || self->mark == NULL) {
        return 0;
    }
    PyObject *m = PyObject_CallNoArgs(self->mark);
    if (m == NULL) {
        return -1;
    }
    PyObject *pair = Py_BuildValue("(iN)", label, m);
    if (pair == NULL) {
        return -1;
    }
    int rc = PyList_Append(self->marks, pair);
    Py_DECREF(pair);
    return rc;
}

/* Closes the current segment at `t` and opens one labelled `label`. */
static int
switch_to(Timer *self, int label, long long t)
{
    if (self->t >= 0) {
        self->acc[self->label] += t - self->t;
    }
    else {
        self->step_t0 = t;
    }
    set_label(self, label);
    self->t = t;
    return add_mark(self, label);
}

COLD static int
bad_phase(int idx)
{
    PyErr_Format(PyExc_ValueError, "phase index %d out of range", idx);
    return 0;
}

static int
valid_phase(int idx)
{
    if (UNLIKELY(idx < 0 || idx >= N_PHASES)) {
        return bad_phase(idx);
    }
    return 1;
}

/* Room for one more open phase on the stack (16 at first, then doubled); -1 on no memory. */
COLD static int
grow_stack(Timer *self)
{
    Py_ssize_t cap = self->cap ? self->cap * 2 : 16;
    int *grown = PyMem_Realloc(self->stack, (size_t)cap * sizeof(int));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->stack = grown;
    self->cap = cap;
    return 0;
}

static int
timer_begin(Timer *self, int idx)
{
    long long t;
    if (!valid_phase(idx) || read_clock(self, &t) < 0) {
        return -1;
    }
    if (UNLIKELY(self->depth == self->cap) && grow_stack(self) < 0) {
        return -1;
    }
    self->stack[self->depth++] = self->label;
    self->seen |= 1LL << idx;
    if (UNLIKELY(self->t < 0 || self->marks != NULL)) {
        return switch_to(self, idx, t);
    }
    self->acc[self->label] += t - self->t;
    set_label(self, idx);
    self->t = t;
    return 0;
}

static int
timer_end(Timer *self)
{
    long long t;
    if (read_clock(self, &t) < 0) {
        return -1;
    }
    if (self->depth == 0) {
        return 0;
    }
    int label = self->stack[--self->depth];
    if (UNLIKELY(self->marks != NULL)) {
        return switch_to(self, label, t);
    }
    self->acc[self->label] += t - self->t;
    set_label(self, label);
    self->t = t;
    return 0;
}

static PyObject *
Timer_begin(Timer *self, PyObject *arg)
{
    int idx = (int)PyLong_AsLong(arg);
    if ((idx == -1 && PyErr_Occurred()) || timer_begin(self, idx) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Timer_end(Timer *self, PyObject *Py_UNUSED(arg))
{
    if (timer_end(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
timer_enter(Timer *self)
{
    long long t;
    self->inside = 1;
    if (self->depth) {
        return 0;
    }
    if (read_clock(self, &t) < 0) {
        return -1;
    }
    if (UNLIKELY(self->t < 0 || self->marks != NULL)) {
        return switch_to(self, OTHER, t);
    }
    self->acc[self->label] += t - self->t;
    set_label(self, OTHER);
    self->t = t;
    return 0;
}

static PyObject *
Timer_enter(Timer *self, PyObject *Py_UNUSED(ignored))
{
    if (timer_enter(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The step's marks as a tuple; the list restarts with its last boundary (the next step's start). */
static PyObject *
take_marks(Timer *self)
{
    Py_ssize_t n = PyList_GET_SIZE(self->marks);
    PyObject *marks = PyList_AsTuple(self->marks);
    if (marks == NULL) {
        return NULL;
    }
    PyObject *rest = PyList_GetSlice(self->marks, n ? n - 1 : 0, n);
    if (rest == NULL) {
        Py_DECREF(marks);
        return NULL;
    }
    Py_SETREF(self->marks, rest);
    return marks;
}

/* Takes a record out of the garbage collector's care. A StepRecord holds numbers, strings,
 * None and tuples of them, so it can never be part of a cycle; tracked, every one that lives
 * past a collection (the history ring) moves up to the oldest generation and brings the next
 * full collection, which walks every object of the process (100+ ms in a torch job), closer.
 * CPython untracks exact tuples of such items itself, never a tuple subclass as these. */
static void
untrack(PyObject *record)
{
    if (PyObject_GC_IsTracked(record)) {
        PyObject_GC_UnTrack(record);
    }
}

/* The step's time per phase as a tuple of ints (Timer._acc). */
static PyObject *
acc_tuple(Timer *self)
{
    return phase_tuple(self->acc);
}

/* A new RawStep, as the pool holds them (raw_take, when the pool has none). */
COLD static RawStep *
raw_new(void)
{
    RawStep *raw = PyObject_New(RawStep, &RawStepType);
    if (raw != NULL) {
        raw->marks = Py_NewRef(Py_None);
        raw->device_mem = Py_NewRef(Py_None);
    }
    return raw;
}

/* A RawStep from the pool (a new reference), or a new one; NULL with an error set. Allocated on
 * the training thread and freed on the tx thread, each RawStep was a malloc and a free on two
 * threads a step; the pool takes back those the tx thread is done with (recycle). A pooled one
 * holds None in `marks` and `device_mem`. */
static RawStep *
raw_take(Timer *self)
{
    while (self->pool_n > 0) {
        PyObject *raw = self->pool[--self->pool_n];
        if (Py_REFCNT(raw) == 1) {
            return (RawStep *)raw;
        }
        Py_DECREF(raw); /* someone took a reference since: it is theirs now */
    }
    return raw_new();
}

static PyObject *
Timer_recycle(Timer *self, PyObject *batch)
{
    if (!PyList_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "recycle() takes a list of RawSteps");
        return NULL;
    }
    if (self->pool == NULL) {
        self->pool = PyMem_New(PyObject *, POOL_CAP);
        if (self->pool == NULL) {
            return PyErr_NoMemory();
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(batch);
    for (Py_ssize_t i = 0; i < n && self->pool_n < POOL_CAP; i++) {
        PyObject *raw = PyList_GET_ITEM(batch, i);
        /* Only a RawStep the list alone holds: any other holder (a CUDA step still pending)
         * keeps it as it is. */
        if (!Py_IS_TYPE(raw, &RawStepType) || Py_REFCNT(raw) != 1) {
            continue;
        }
        Py_SETREF(((RawStep *)raw)->marks, Py_NewRef(Py_None));
        Py_SETREF(((RawStep *)raw)->device_mem, Py_NewRef(Py_None));
        self->pool[self->pool_n++] = Py_NewRef(raw);
    }
    Py_RETURN_NONE;
}

/* `fn()` as a long long, or `otherwise` when `fn` is unset; -1 with an error set on failure. */
static int
call_ll(PyObject *fn, long long otherwise, long long *out)
{
    if (fn == NULL) {
        *out = otherwise;
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL) {
        return -1;
    }
    *out = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The due beat, at the end of the step that ended at `t`: beat(t) returns the next due time.
 * Until it returns, the next is a second away, so a beat that raised (KeyboardInterrupt: the
 * worker's beat catches every Exception) is tried again a second later. */
COLD static int
call_beat(Timer *self, long long t)
{
    self->beat_due = t + 1000000000LL;
    PyObject *arg = PyLong_FromLongLong(t);
    if (arg == NULL) {
        return -1;
    }
    PyObject *r = PyObject_CallOneArg(self->beat, arg);
    Py_DECREF(arg);
    if (r == NULL) {
        return -1;
    }
    long long due = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (due == -1 && PyErr_Occurred()) {
        return -1;
    }
    self->beat_due = due;
    return 0;
}

/* The step that ended at `t` has been handed over: its times cleared, the next one begun. The
 * RSS reader when a read is due at this end, else NULL (the step reads -1). */
static inline PyObject *
next_step(Timer *self, long long t)
{
    memset(self->acc, 0, sizeof(self->acc));
    self->step += 1;
    self->step_t0 = t;
    if (self->read_rss != NULL && t - self->last_rss_ns >= RSS_INTERVAL_NS) {
        self->last_rss_ns = t;
        return self->read_rss;
    }
    return NULL;
}

/* The step that ended at `t` into the ring, instead of a RawStep into the queue. */
static int
ring_exit(Timer *self, long long t, long long step_start)
{
    long long n = self->ring[RING_WRITTEN]; /* this thread alone writes it */
    long long *w = self->ring + RING_HEADER + (n % self->ring_slots) * STEP_WORDS;
    w[0] = self->step;
    w[1] = step_start;
    w[2] = t;
    memcpy(w + 3, self->acc, sizeof(self->acc));
    w[3 + N_PHASES] = self->seen;
    PyObject *read_rss = next_step(self, t);
    /* A call that fails leaves the step unpublished: its number is missing, counted dropped. */
    if (call_ll(read_rss, -1, &w[4 + N_PHASES]) < 0 ||
        call_ll(self->comm, -1, &w[5 + N_PHASES]) < 0) {
        return -1;
    }
    __atomic_store_n(&self->ring[RING_WRITTEN], n + 1, __ATOMIC_RELEASE);
    if (self->beat != NULL && UNLIKELY(t >= self->beat_due)) {
        return call_beat(self, t);
    }
    return 0;
}

static int
timer_exit(Timer *self)
{
    long long t;
    if (read_clock(self, &t) < 0) {
        return -1;
    }
    self->depth = 0;
    self->inside = 0;
    long long step_start = self->step_t0;
    if (UNLIKELY(self->t < 0 || self->marks != NULL)) {
        if (switch_to(self, BETWEEN, t) < 0) {
            return -1;
        }
        step_start = self->step_t0;
    }
    else {
        self->acc[self->label] += t - self->t;
        set_label(self, BETWEEN);
        self->t = t;
    }
    if (self->ring != NULL && self->marks == NULL && self->read_device == NULL) {
        return ring_exit(self, t, step_start);
    }
    RawStep *raw = raw_take(self);
    if (raw == NULL) {
        return -1;
    }
    raw->step = self->step;
    raw->start_ns = step_start;
    raw->end_ns = t;
    memcpy(raw->phase_ns, self->acc, sizeof(self->acc));
    raw->seen = self->seen;
    PyObject *read_rss = next_step(self, t);
    /* In RawStep's order; the first failure stops (no Python call with an error set). */
    if (call_ll(read_rss, -1, &raw->rss_pages) < 0) {
        goto fail;
    }
    if (UNLIKELY(self->marks != NULL)) {
        PyObject *marks = take_marks(self);
        if (marks == NULL) {
            goto fail;
        }
        Py_SETREF(raw->marks, marks);
    }
    if (UNLIKELY(self->read_device != NULL)) {
        PyObject *dev = PyObject_CallNoArgs(self->read_device);
        if (dev == NULL) {
            goto fail;
        }
        Py_SETREF(raw->device_mem, dev);
    }
    if (call_ll(self->comm, -1, &raw->comm_ns) < 0) {
        goto fail;
    }
    PyObject *r = PyObject_CallOneArg(self->out_append, (PyObject *)raw);
    Py_DECREF(raw);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    if (self->beat != NULL && UNLIKELY(t >= self->beat_due)) {
        return call_beat(self, t);
    }
    return 0;
fail:
    Py_DECREF(raw);
    return -1;
}

static PyObject *
Timer_exit(Timer *self, PyObject *Py_UNUSED(ignored))
{
    if (timer_exit(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Timer_rest(Timer *self, PyObject *Py_UNUSED(ignored))
{
    if (self->inside || self->depth) {
        Py_RETURN_NONE;
    }
    self->t = -1;
    memset(self->acc, 0, sizeof(self->acc));
    if (self->marks != NULL) {
        PyObject *fresh = PyList_New(0);
        if (fresh == NULL) {
            return NULL;
        }
        Py_SETREF(self->marks, fresh);
    }
    Py_RETURN_NONE;
}

/* Sets *slot to `value`, None meaning unset (NULL). */
static void
set_optional(PyObject **slot, PyObject *value)
{
    Py_XSETREF(*slot, value == Py_None ? NULL : Py_NewRef(value));
}

static PyObject *
Timer_use_cuda(Timer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "use_cuda() takes 2 arguments (mark, read_device)");
        return NULL;
    }
    set_optional(&self->mark, args[0]);
    set_optional(&self->read_device, args[1]);
    if (self->marks == NULL && (self->marks = PyList_New(0)) == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Timer_use_comm(Timer *self, PyObject *take)
{
    set_optional(&self->comm, take);
    Py_RETURN_NONE;
}

static PyObject *
Timer_use_beat(Timer *self, PyObject *beat)
{
    set_optional(&self->beat, beat);
    self->beat_due = 0; /* the first step's end asks */
    Py_RETURN_NONE;
}

/* Whether phase `idx` is the innermost one open (Timer.in_phase; forward's Roots asks it of
 * backward). */
static int
timer_in_phase(Timer *self, long idx)
{
    return self->label == idx && self->depth > 0;
}

static PyObject *
Timer_in_phase(Timer *self, PyObject *arg)
{
    long idx = PyLong_AsLong(arg);
    if (idx == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(timer_in_phase(self, idx));
}

static PyObject *
Timer_get_open_phase(Timer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->label);
}

static PyObject *
Timer_get_acc(Timer *self, void *Py_UNUSED(closure))
{
    PyObject *acc = acc_tuple(self);
    if (acc == NULL) {
        return NULL;
    }
    Py_SETREF(acc, PySequence_List(acc));
    return acc;
}

/* Back to the queue: the ring's buffer let go, the open phase written nowhere else. */
static void
ring_release(Timer *self)
{
    if (self->ring != NULL) {
        self->ring = NULL;
        PyBuffer_Release(&self->ring_view);
    }
    self->ring_slots = 0;
    self->label_out = &self->label_sink;
}

static PyObject *
Timer_use_ring(Timer *self, PyObject *buffer)
{
    ring_release(self);
    if (buffer == Py_None) {
        Py_RETURN_NONE;
    }
    if (PyObject_GetBuffer(buffer, &self->ring_view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    long long *words = (long long *)self->ring_view.buf;
    long long slots = ring_slots_of(words, self->ring_view.len, "use_ring");
    if (slots < 0) {
        PyBuffer_Release(&self->ring_view);
        return NULL;
    }
    self->ring = words;
    self->ring_slots = slots;
    self->label_out = &words[RING_LABEL];
    *self->label_out = self->label;
    Py_RETURN_NONE;
}

static int
Timer_init(Timer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"out", "clock", "read_rss", "mark", NULL};
    PyObject *out, *clock = Py_None, *read_rss = Py_None, *mark = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO:StepTimer", kwlist, &out, &clock,
                                     &read_rss, &mark)) {
        return -1;
    }
    PyObject *append = PyObject_GetAttrString(out, "append");
    if (append == NULL) {
        return -1;
    }
    Py_XSETREF(self->out_append, append);
    set_optional(&self->clock, clock);
    set_optional(&self->read_rss, read_rss);
    set_optional(&self->mark, mark);
    Py_CLEAR(self->read_device);
    Py_CLEAR(self->comm);
    Py_CLEAR(self->beat);
    self->beat_due = 0;
    Py_CLEAR(self->marks);
    if (self->mark != NULL && (self->marks = PyList_New(0)) == NULL) {
        return -1;
    }
    memset(self->acc, 0, sizeof(self->acc));
    self->depth = 0;
    ring_release(self);
    self->label = BETWEEN;
    self->t = -1;
    self->step_t0 = -1;
    self->last_rss_ns = -RSS_INTERVAL_NS;
    self->inside = 0;
    self->seen = (1LL << BETWEEN) | (1LL << OTHER);
    self->step = 0;
    return 0;
}

static int
Timer_traverse(Timer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->out_append);
    Py_VISIT(self->clock);
    Py_VISIT(self->read_rss);
    Py_VISIT(self->mark);
    Py_VISIT(self->read_device);
    Py_VISIT(self->comm);
    Py_VISIT(self->beat);
    Py_VISIT(self->marks);
    return 0; /* the pool's RawSteps are not the collector's: they hold None there */
}

static void
pool_clear(Timer *self)
{
    while (self->pool_n > 0) {
        Py_DECREF(self->pool[--self->pool_n]);
    }
}

static int
Timer_clear(Timer *self)
{
    pool_clear(self);
    ring_release(self);
    Py_CLEAR(self->out_append);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->read_rss);
    Py_CLEAR(self->mark);
    Py_CLEAR(self->read_device);
    Py_CLEAR(self->comm);
    Py_CLEAR(self->beat);
    Py_CLEAR(self->marks);
    return 0;
}

static void
Timer_dealloc(Timer *self)
{
    PyObject_GC_UnTrack(self);
    Timer_clear(self);
    PyMem_Free(self->stack);
    PyMem_Free(self->pool);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Timer_methods[] = {
    {"begin", (PyCFunction)Timer_begin, METH_O, "A measured phase starts (the inner one wins)."},
    {"end", (PyCFunction)Timer_end, METH_O, "The innermost measured phase ends."},
    {"enter", (PyCFunction)Timer_enter, METH_NOARGS, "trace_step was entered."},
    {"exit", (PyCFunction)Timer_exit, METH_NOARGS, "trace_step was left: emit the step."},
    {"rest", (PyCFunction)Timer_rest, METH_NOARGS, "The loop paused between steps."},
    {"use_cuda", (PyCFunction)(void (*)(void))Timer_use_cuda, METH_FASTCALL,
     "Record a CUDA event at each boundary and device memory per step."},
    {"use_comm", (PyCFunction)Timer_use_comm, METH_O, "Ask take() for each step's comm wait."},
    {"use_beat", (PyCFunction)Timer_use_beat, METH_O,
     "Call beat(t) at a step's end once its clock reads the due time beat last returned."},
    {"in_phase", (PyCFunction)Timer_in_phase, METH_O, "True while idx is the innermost phase."},
    {"use_ring", (PyCFunction)Timer_use_ring, METH_O,
     "Write each host step into the ring in this writable buffer (None: back to the queue)."},
    {"recycle", (PyCFunction)Timer_recycle, METH_O,
     "Take back a list of RawSteps the caller is done with, for reuse (tx thread)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Timer_members[] = {
    {"inside", T_BOOL, offsetof(Timer, inside), 0, "True inside trace_step."},
    {"seen", T_LONGLONG, offsetof(Timer, seen), 0, "Bit i set once phase i was observed."},
    {"step", T_LONGLONG, offsetof(Timer, step), 0, "Index of the next step."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Timer_getset[] = {
    {"open_phase", (getter)Timer_get_open_phase, NULL, "Phase time is counted in now.", NULL},
    {"_acc", (getter)Timer_get_acc, NULL, "Time per phase so far in this step (a copy).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TimerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceml.instrument._native.StepTimer",
    .tp_doc = "The step timer, in C (see traceml.instrument.timer.StepTimer).",
    .tp_basicsize = sizeof(Timer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Timer_init,
    .tp_dealloc = (destructor)Timer_dealloc,
    .tp_traverse = (traverseproc)Timer_traverse,
    .tp_clear = (inquiry)Timer_clear,
    .tp_methods = Timer_methods,
    .tp_members = Timer_members,
    .tp_getset = Timer_getset,
};

/* ---- wrappers: the hooks' per-call work, without a Python frame --------------------------- */

/* Takes the pending exception as one object with its traceback (PyErr_GetRaisedException, which
 * CPython has from 3.12 on, written out for the versions before). */
COLD static PyObject *
take_raised(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL && exc != NULL) {
        PyException_SetTraceback(exc, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return exc;
#endif
}

/* Raises `exc` again (take_raised's inverse); steals the reference. */
COLD static void
restore_raised(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

/* TraceML failed inside a wrapper: hand the exception to `on_error` (which warns once and takes
 * every hook away) and clear it, so the user's call goes on. Only Exception subclasses, as the
 * Python wrappers' `except Exception`: returns -1 with anything else (KeyboardInterrupt) still set. */
COLD static int
report(PyObject *on_error)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return -1;
    }
    PyObject *exc = take_raised();
    PyObject *r = PyObject_CallOneArg(on_error, exc);
    Py_XDECREF(exc);
    if (r == NULL) {
        PyErr_WriteUnraisable(on_error);
    }
    Py_XDECREF(r);
    return 0;
}

static Timer *
timer_arg(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &TimerType)) {
        PyErr_SetString(PyExc_TypeError, "timer must be a _native.StepTimer");
        return NULL;
    }
    return (Timer *)obj;
}

/* Binds like a function: `obj.attr` gives a method, `Class.attr` the wrapper itself. */
static PyObject *
bind(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

/* Timed(timer, idx, original, after, on_error): calls `original` as one measured phase. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Timer *timer;
    PyObject *original;
    PyObject *after;
    PyObject *on_error;
    int idx;
} Timed;

static PyObject *
Timed_vectorcall(Timed *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (timer_begin(self->timer, self->idx) < 0 && report(self->on_error) < 0) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    /* Keep the call's own exception aside while the phase ends (as `finally:` does). */
    PyObject *raised = result == NULL ? take_raised() : NULL;
    int ok = timer_end(self->timer) == 0;
    if (ok && self->after != NULL) {
        PyObject *r = PyObject_CallNoArgs(self->after);
        ok = r != NULL;
        Py_XDECREF(r);
    }
    if (!ok && report(self->on_error) < 0) {
        Py_XDECREF(result);
        Py_XDECREF(raised);
        return NULL;
    }
    if (raised != NULL) {
        restore_raised(raised);
    }
    return result;
}

static int
Timed_init(Timed *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timer", "idx", "original", "after", "on_error", NULL};
    PyObject *timer, *original, *after, *on_error;
    int idx;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OiOOO:Timed", kwlist, &timer, &idx, &original,
                                     &after, &on_error)) {
        return -1;
    }
    if (timer_arg(timer) == NULL || !valid_phase(idx)) {
        return -1;
    }
    Py_XSETREF(self->timer, (Timer *)Py_NewRef(timer));
    Py_XSETREF(self->original, Py_NewRef(original));
    set_optional(&self->after, after);
    Py_XSETREF(self->on_error, Py_NewRef(on_error));
    self->idx = idx;
    self->vectorcall = (vectorcallfunc)Timed_vectorcall;
    return 0;
}

static int
Timed_traverse(Timed *self, visitproc visit, void *arg)
{
    Py_VISIT(self->timer);
    Py_VISIT(self->original);
    Py_VISIT(self->after);
    Py_VISIT(self->on_error);
    return 0;
}

static int
Timed_clear(Timed *self)
{
    Py_CLEAR(self->timer);
    Py_CLEAR(self->original);
    Py_CLEAR(self->after);
    Py_CLEAR(self->on_error);
    return 0;
}

static void
Timed_dealloc(Timed *self)
{
    PyObject_GC_UnTrack(self);
    Timed_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Timed_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Timed, original), READONLY, "The wrapped callable."},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *
Timed_get_after(Timed *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->after != NULL ? self->after : Py_None);
}

static int
Timed_set_after(Timed *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "after cannot be deleted (set it to None)");
        return -1;
    }
    set_optional(&self->after, value);
    return 0;
}

static PyGetSetDef Timed_getset[] = {
    {"after", (getter)Timed_get_after, (setter)Timed_set_after,
     "Called with no arguments after each call's phase ends, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TimedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceml.instrument._native.Timed",
    .tp_doc = "Timed(timer, idx, original, after, on_error): `original` timed as phase idx.",
    .tp_basicsize = sizeof(Timed),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Timed, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = bind,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Timed_init,
    .tp_dealloc = (destructor)Timed_dealloc,
    .tp_traverse = (traverseproc)Timed_traverse,
    .tp_clear = (inquiry)Timed_clear,
    .tp_members = Timed_members,
    .tp_getset = Timed_getset,
};

/* Edge(timer, idx, starts, on_error, note): an optimizer step hook `(opt, args, kwargs)` that
 * begins (starts) or ends phase idx; `note(opt)` runs when the optimizer's class changes. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Timer *timer;
    PyObject *on_error;
    PyObject *note;
    PyObject *last_type;
    int idx;
    int starts;
} Edge;

static PyObject *
Edge_vectorcall(Edge *self, PyObject *const *args, size_t nargsf, PyObject *Py_UNUSED(kwnames))
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int rc = self->starts ? timer_begin(self->timer, self->idx) : timer_end(self->timer);
    if (rc == 0 && self->note != NULL && nargs > 0 &&
        (PyObject *)Py_TYPE(args[0]) != self->last_type) {
        Py_XSETREF(self->last_type, Py_NewRef((PyObject *)Py_TYPE(args[0])));
        PyObject *r = PyObject_CallOneArg(self->note, args[0]);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    if (rc < 0 && report(self->on_error) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
Edge_init(Edge *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timer", "idx", "starts", "on_error", "note", NULL};
    PyObject *timer, *on_error, *note = Py_None;
    int idx, starts;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OipO|O:Edge", kwlist, &timer, &idx, &starts,
                                     &on_error, &note)) {
        return -1;
    }
    if (timer_arg(timer) == NULL || !valid_phase(idx)) {
        return -1;
    }
    Py_XSETREF(self->timer, (Timer *)Py_NewRef(timer));
    Py_XSETREF(self->on_error, Py_NewRef(on_error));
    set_optional(&self->note, note);
    Py_CLEAR(self->last_type);
    self->idx = idx;
    self->starts = starts;
    self->vectorcall = (vectorcallfunc)Edge_vectorcall;
    return 0;
}

static int
Edge_traverse(Edge *self, visitproc visit, void *arg)
{
    Py_VISIT(self->timer);
    Py_VISIT(self->on_error);
    Py_VISIT(self->note);
    Py_VISIT(self->last_type);
    return 0;
}

static int
Edge_clear(Edge *self)
{
    Py_CLEAR(self->timer);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->note);
    Py_CLEAR(self->last_type);
    return 0;
}

static void
Edge_dealloc(Edge *self)
{
    PyObject_GC_UnTrack(self);
    Edge_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject EdgeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceml.instrument._native.Edge",
    .tp_doc = "Edge(timer, idx, starts, on_error, note=None): an optimizer step hook.",
    .tp_basicsize = sizeof(Edge),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Edge, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Edge_init,
    .tp_dealloc = (destructor)Edge_dealloc,
    .tp_traverse = (traverseproc)Edge_traverse,
    .tp_clear = (inquiry)Edge_clear,
};

/* Roots(timer, state, on_error, forward, backward): a root module call's two sides, its methods
 * enter() and leave(), as forward.make_edges's Python reference. The code that calls them stays
 * Python (it is torch's own `__call__`, which dynamo traces) and runs torch's body between them:
 *
 *     try:
 *         enter()
 *         <torch's body>
 *     finally:
 *         leave()
 *
 * enter passes unless on the owner thread, marks the root open (state.busy) and begins `forward`
 * inside a step unless backward is open (an activation checkpoint's recompute), and notes what it
 * opened here; leave, on the owner thread, ends that. enter sits inside the `try`: an interrupt
 * delivered as enter's call returns still reaches leave, and nothing stays open. leave runs in a
 * `finally`, possibly while the module's exception unwinds: that exception sits on the caller's
 * frame, not in the thread state, so nothing here disturbs it. `state` is forward.RootState, read
 * and written through its slots so that the Python code and dynamo see the same object. */
typedef struct {
    PyObject_HEAD
    Timer *timer;
    PyObject *state;
    PyObject *on_error;
    PyObject *busy_d;     /* RootState's slot descriptors ("busy", "owner"), or NULL */
    PyObject *owner_d;
    int forward;
    int backward;
    int opened;           /* ROOT_OTHER, ROOT_OPEN or ROOT_TIMED: the owner's open root */
} Roots;

#define ROOT_OTHER 0  /* nothing open */
#define ROOT_OPEN 1   /* the root is open (busy), not timed */
#define ROOT_TIMED 2  /* open and timed as forward */

static PyObject *BUSY; /* "busy" and "owner", RootState's attributes */
static PyObject *OWNER;

/* `state`'s slot `name` as its class defines it (a member descriptor), or NULL (no error set)
 * when it is held some other way. Read and written through the member itself, a slot is the
 * same attribute Python code sees, without the attribute lookup through the class on each call
 * (about 20 ns each, three a root call). */
static PyObject *
slot_of(PyObject *state, PyObject *name)
{
    PyObject *d = PyDict_GetItemWithError(Py_TYPE(state)->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
        !PyObject_TypeCheck(state, ((PyMemberDescrObject *)d)->d_common.d_type)) {
        PyErr_Clear();
        return NULL;
    }
    return Py_NewRef(d);
}

static PyObject *
state_get(PyObject *state, PyObject *slot, PyObject *name)
{
    if (slot == NULL) {
        return PyObject_GetAttr(state, name);
    }
    return PyMember_GetOne((const char *)state, ((PyMemberDescrObject *)slot)->d_member);
}

static int
state_set(PyObject *state, PyObject *slot, PyObject *name, PyObject *value)
{
    if (slot == NULL) {
        return PyObject_SetAttr(state, name, value);
    }
    return PyMember_SetOne((char *)state, ((PyMemberDescrObject *)slot)->d_member, value);
}

/* 1 when the calling thread is state.owner, 0 when not (or owner is None), -1 on error. */
static int
on_owner_thread(Roots *self)
{
    PyObject *owner = state_get(self->state, self->owner_d, OWNER);
    if (owner == NULL) {
        return -1;
    }
    int mine = 0;
    if (owner != Py_None) {
        unsigned long id = PyLong_AsUnsignedLong(owner);
        mine = id == PyThread_get_thread_ident();
        if (id == (unsigned long)-1 && PyErr_Occurred()) {
            mine = -1;
        }
    }
    Py_DECREF(owner);
    return mine;
}

static PyObject *
Roots_enter(Roots *self, PyObject *Py_UNUSED(ignored))
{
    int mine = on_owner_thread(self);
    if (mine <= 0) {
        if (mine < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    /* Set outside steps too, so a compiled module sees one value (no recompile). */
    if (state_set(self->state, self->busy_d, BUSY, Py_True) < 0) {
        return NULL;
    }
    Timer *t = self->timer;
    if (!t->inside || timer_in_phase(t, self->backward)) {
        self->opened = ROOT_OPEN;
        Py_RETURN_NONE;
    }
    if (timer_begin(t, self->forward) < 0 && report(self->on_error) < 0) {
        PyObject *raised = take_raised();
        state_set(self->state, self->busy_d, BUSY, Py_False);
        restore_raised(raised);
        return NULL;
    }
    self->opened = ROOT_TIMED;
    Py_RETURN_NONE;
}

static PyObject *
Roots_leave(Roots *self, PyObject *Py_UNUSED(ignored))
{
    int opened = self->opened;
    if (opened == ROOT_OTHER) {
        Py_RETURN_NONE;
    }
    int mine = on_owner_thread(self); /* another thread's call never closes the owner's root */
    if (mine <= 0) {
        if (mine < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    self->opened = ROOT_OTHER;
    int failed = opened == ROOT_TIMED && timer_end(self->timer) < 0 &&
                 report(self->on_error) < 0;
    PyObject *raised = failed ? take_raised() : NULL;
    if (state_set(self->state, self->busy_d, BUSY, Py_False) < 0) {
        Py_XDECREF(raised);
        return NULL;
    }
    if (raised != NULL) {
        restore_raised(raised);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef Roots_methods[] = {
    {"enter", (PyCFunction)Roots_enter, METH_NOARGS, "Open a root module call (and time it)."},
    {"leave", (PyCFunction)Roots_leave, METH_NOARGS, "Close what enter() opened."},
    {NULL, NULL, 0, NULL},
};

static int
Roots_init(Roots *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timer", "state", "on_error", "forward", "backward", NULL};
    PyObject *timer, *state, *on_error;
    int forward, backward;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOii:Roots", kwlist, &timer, &state,
                                     &on_error, &forward, &backward)) {
        return -1;
    }
    if (timer_arg(timer) == NULL || !valid_phase(forward) || !valid_phase(backward)) {
        return -1;
    }
    Py_XSETREF(self->timer, (Timer *)Py_NewRef(timer));
    Py_XSETREF(self->state, Py_NewRef(state));
    Py_XSETREF(self->on_error, Py_NewRef(on_error));
    Py_XSETREF(self->busy_d, slot_of(state, BUSY));
    Py_XSETREF(self->owner_d, slot_of(state, OWNER));
    self->forward = forward;
    self->backward = backward;
    self->opened = ROOT_OTHER;
    return 0;
}

static int
Roots_traverse(Roots *self, visitproc visit, void *arg)
{
    Py_VISIT(self->timer);
    Py_VISIT(self->state);
    Py_VISIT(self->on_error);
    Py_VISIT(self->busy_d);
    Py_VISIT(self->owner_d);
    return 0;
}

static int
Roots_clear(Roots *self)
{
    Py_CLEAR(self->timer);
    Py_CLEAR(self->state);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->busy_d);
    Py_CLEAR(self->owner_d);
    return 0;
}

static void
Roots_dealloc(Roots *self)
{
    PyObject_GC_UnTrack(self);
    Roots_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject RootsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceml.instrument._native.Roots",
    .tp_doc = "Roots(timer, state, on_error, forward, backward): a root module call's enter() "
              "and leave().",
    .tp_basicsize = sizeof(Roots),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_methods = Roots_methods,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Roots_init,
    .tp_dealloc = (destructor)Roots_dealloc,
    .tp_traverse = (traverseproc)Roots_traverse,
    .tp_clear = (inquiry)Roots_clear,
};

/* Step(timer, on_nested, on_error): what `trace_step` returns (as api.StepContext). A nested
 * one calls on_nested() and is otherwise ignored; the step's result is never suppressed. */
typedef struct {
    PyObject_HEAD
    Timer *timer;
    PyObject *on_nested;
    PyObject *on_error;
    Py_ssize_t depth;
} Step;

static PyObject *
Step_enter(Step *self, PyObject *Py_UNUSED(ignored))
{
    int rc;
    if (++self->depth == 1) {
        rc = timer_enter(self->timer);
    }
    else {
        PyObject *r = PyObject_CallNoArgs(self->on_nested);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    if (rc < 0 && report(self->on_error) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Step_exit(Step *self, PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(nargs))
{
    if (--self->depth == 0 && timer_exit(self->timer) < 0 && report(self->on_error) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
Step_init(Step *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timer", "on_nested", "on_error", NULL};
    PyObject *timer, *on_nested, *on_error;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:Step", kwlist, &timer, &on_nested,
                                     &on_error)) {
        return -1;
    }
    if (timer_arg(timer) == NULL) {
        return -1;
    }
    Py_XSETREF(self->timer, (Timer *)Py_NewRef(timer));
    Py_XSETREF(self->on_nested, Py_NewRef(on_nested));
    Py_XSETREF(self->on_error, Py_NewRef(on_error));
    self->depth = 0;
    return 0;
}

static int
Step_traverse(Step *self, visitproc visit, void *arg)
{
    Py_VISIT(self->timer);
    Py_VISIT(self->on_nested);
    Py_VISIT(self->on_error);
    return 0;
}

static int
Step_clear(Step *self)
{
    Py_CLEAR(self->timer);
    Py_CLEAR(self->on_nested);
    Py_CLEAR(self->on_error);
    return 0;
}

static void
Step_dealloc(Step *self)
{
    PyObject_GC_UnTrack(self);
    Step_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Step_methods[] = {
    {"__enter__", (PyCFunction)Step_enter, METH_NOARGS, "A step starts."},
    {"__exit__", (PyCFunction)(void (*)(void))Step_exit, METH_FASTCALL, "The step ends."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceml.instrument._native.Step",
    .tp_doc = "Step(timer, on_nested, on_error): the context manager trace_step returns.",
    .tp_basicsize = sizeof(Step),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Step_init,
    .tp_dealloc = (destructor)Step_dealloc,
    .tp_traverse = (traverseproc)Step_traverse,
    .tp_clear = (inquiry)Step_clear,
    .tp_methods = Step_methods,
};

/* ---- the tx thread's conversion: RawSteps to StepRecords --------------------------------- */

#define BACKWARD 3
#define RECORD_FIELDS 12
#define NS_PER_MS 1e6

static PyObject *HOST; /* "host", the clock of every record built here */

/* A long long from a tuple item, or -1 with an error set. PyLong_AsLongLong converts any int
 * of more than one 30-bit digit through a byte array (about 100 instructions; 1,000 a record,
 * since every nanosecond value has two or three digits), where PyLong_AsLong sums the digits
 * in place: the same range where long has 64 bits. */
static long long
item_ll(PyObject *tuple, Py_ssize_t i)
{
#if LONG_MAX == LLONG_MAX
    return PyLong_AsLong(PyTuple_GET_ITEM(tuple, i));
#else
    return PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
#endif
}

/* The phases tuple: ms per phase, None for a phase the run has never shown. */
static PyObject *
phases_ms(const long long *phase_ns, long long seen)
{
    PyObject *out = PyTuple_New(N_PHASES);
    if (out == NULL) {
        return NULL;
    }
    for (int i = 0; i < N_PHASES; i++) {
        PyObject *v = (seen >> i) & 1 ? PyFloat_FromDouble((double)phase_ns[i] / NS_PER_MS)
                                      : Py_NewRef(Py_None);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    /* Floats and None only: no cycle. Tracked, each record's phases sat in the young
     * generation until a collection untracked it, and every collection on the tx thread
     * traversed a tick's worth of them (most of what it found there). */
    untrack(out);
    return out;
}

/* A float, or None when `ok` is false. */
static PyObject *
float_or_none(int ok, double value)
{
    return ok ? PyFloat_FromDouble(value) : Py_NewRef(Py_None);
}

/* One step's values, whichever RawStep they came from. */
typedef struct {
    PyObject *step; /* the step's index as an int */
    long long start, end, seen, rss, comm;
    long long phase_ns[N_PHASES];
    PyObject *dev;  /* borrowed: None or a 3-tuple */
} StepValues;

/* The values of timer.RawStep, a tuple (the Python timer's); -1 with an error set. */
static int
tuple_values(PyObject *raw, StepValues *v)
{
    if (!PyTuple_Check(raw) || PyTuple_GET_SIZE(raw) != RAW_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "a RawStep of 9 fields was expected");
        return -1;
    }
    PyObject *phase_ns = PyTuple_GET_ITEM(raw, 3);
    if (!PyTuple_Check(phase_ns) || PyTuple_GET_SIZE(phase_ns) != N_PHASES) {
        PyErr_SetString(PyExc_TypeError, "phase_ns must be a tuple of N_PHASES ints");
        return -1;
    }
    v->step = PyTuple_GET_ITEM(raw, 0);
    v->start = item_ll(raw, 1);
    v->end = item_ll(raw, 2);
    v->seen = item_ll(raw, 4);
    v->rss = item_ll(raw, 5);
    v->comm = item_ll(raw, 8);
    for (int i = 0; i < N_PHASES; i++) {
        v->phase_ns[i] = item_ll(phase_ns, i);
    }
    v->dev = PyTuple_GET_ITEM(raw, 7);
    return PyErr_Occurred() ? -1 : 0;
}

/* The StepRecord of one step's host-clock values, as resolve.host_records builds it. */
static PyObject *
host_record(const StepValues *v, PyObject *rank, long long wall_offset_ns, double page_mb,
            PyTypeObject *record_type)
{
    PyObject *dev = v->dev;
    if (dev != Py_None && (!PyTuple_Check(dev) || PyTuple_GET_SIZE(dev) != 3)) {
        PyErr_SetString(PyExc_TypeError, "device_mem must be None or a 3-tuple");
        return NULL;
    }
    PyObject *items[RECORD_FIELDS] = {NULL};
    double backward_ms = (double)v->phase_ns[BACKWARD] / NS_PER_MS;
    items[0] = Py_NewRef(rank);
    items[1] = Py_NewRef(v->step);
    items[2] = PyFloat_FromDouble((double)(v->start + wall_offset_ns) / 1e9);
    items[3] = PyFloat_FromDouble((double)(v->end - v->start) / NS_PER_MS);
    items[4] = phases_ms(v->phase_ns, v->seen);
    items[5] = Py_NewRef(HOST);
    items[6] = float_or_none(v->rss >= 0, (double)v->rss * page_mb);
    for (int i = 0; i < 3; i++) {
        items[7 + i] = Py_NewRef(dev == Py_None ? Py_None : PyTuple_GET_ITEM(dev, i));
    }
    double comm_ms = (double)v->comm / NS_PER_MS;
    items[10] = float_or_none(v->comm >= 0, comm_ms <= backward_ms ? comm_ms : backward_ms);
    items[11] = Py_NewRef(Py_None); /* held_ms: the caller adds it to the few that have one */
    PyObject *record = NULL;
    for (int i = 0; i < RECORD_FIELDS; i++) {
        if (items[i] == NULL) {
            goto done;
        }
    }
    record = record_type->tp_alloc(record_type, RECORD_FIELDS);
    if (record != NULL) {
        for (int i = 0; i < RECORD_FIELDS; i++) {
            PyTuple_SET_ITEM(record, i, items[i]);
            items[i] = NULL;
        }
        untrack(record);
    }
done:
    for (int i = 0; i < RECORD_FIELDS; i++) {
        Py_XDECREF(items[i]);
    }
    return record;
}

/* The StepRecord of a RawStep of either kind (this module's, or timer.RawStep's tuple). */
static PyObject *
raw_record(PyObject *raw, PyObject *rank, long long wall_offset_ns, double page_mb,
           PyTypeObject *record_type)
{
    StepValues v;
    PyObject *step = NULL; /* owned here: a C RawStep's index made an int */
    if (!Py_IS_TYPE(raw, &RawStepType)) {
        if (tuple_values(raw, &v) < 0) {
            return NULL;
        }
    }
    else {
        RawStep *r = (RawStep *)raw;
        if ((step = PyLong_FromLongLong(r->step)) == NULL) {
            return NULL;
        }
        v.step = step;
        v.start = r->start_ns;
        v.end = r->end_ns;
        v.seen = r->seen;
        v.rss = r->rss_pages;
        v.comm = r->comm_ns;
        memcpy(v.phase_ns, r->phase_ns, sizeof(v.phase_ns));
        v.dev = r->device_mem;
    }
    PyObject *record = host_record(&v, rank, wall_offset_ns, page_mb, record_type);
    Py_XDECREF(step);
    return record;
}

static PyObject *
host_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *record_type, *raws, *rank;
    long long wall_offset_ns;
    double page_mb;
    if (!PyArg_ParseTuple(args, "OOOLd:host_records", &record_type, &raws, &rank,
                          &wall_offset_ns, &page_mb)) {
        return NULL;
    }
    if (!PyType_Check(record_type) ||
        !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type) ||
        ((PyTypeObject *)record_type)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass without slots");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(raws, "raws must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *rec = raw_record(PySequence_Fast_GET_ITEM(seq, i), rank, wall_offset_ns,
                                   page_mb, (PyTypeObject *)record_type);
        if (rec == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, rec);
    }
    Py_DECREF(seq);
    return out;
}

/* ---- The step ring's reader: ring_read and raw_unpack (the beats process) ---------------- */

/* ring_read(buffer, start): (bytes of the steps from number `start` on that are still in the
 * ring, the number after the last). Steps the writer overwrote before or while they were copied
 * are left out: the caller sees the gap in their numbers. */
static PyObject *
ring_read(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *buffer;
    long long start;
    if (!PyArg_ParseTuple(args, "OL:ring_read", &buffer, &start)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    const long long *words = (const long long *)view.buf;
    long long slots = ring_slots_of(words, view.len, "ring_read");
    if (slots < 0) {
        goto done;
    }
    long long written = __atomic_load_n(&words[RING_WRITTEN], __ATOMIC_ACQUIRE);
    long long first = start > written - slots ? start : written - slots;
    if (first > written) {
        first = written;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (written - first) * STEP_WORDS * 8);
    if (data == NULL) {
        goto done;
    }
    char *out = PyBytes_AS_STRING(data);
    for (long long i = first; i < written; i++) {
        memcpy(out + (i - first) * STEP_WORDS * 8,
               words + RING_HEADER + (i % slots) * STEP_WORDS, STEP_WORDS * 8);
    }
    /* Those the writer reached again while they were copied may be torn: dropped. */
    long long after = __atomic_load_n(&words[RING_WRITTEN], __ATOMIC_ACQUIRE);
    long long safe = after - slots > first ? after - slots : first;
    if (safe > first) {
        Py_ssize_t cut = (Py_ssize_t)((safe < written ? safe : written) - first) * STEP_WORDS * 8;
        PyObject *kept = PyBytes_FromStringAndSize(out + cut, PyBytes_GET_SIZE(data) - cut);
        Py_SETREF(data, kept);
        if (data == NULL) {
            goto done;
        }
    }
    result = Py_BuildValue("(NL)", data, written);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
raw_unpack(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *out = NULL;
    if (view.len % (STEP_WORDS * 8) != 0) {
        PyErr_SetString(PyExc_ValueError, "raw_unpack(): not a whole number of steps");
        goto done;
    }
    Py_ssize_t n = view.len / (STEP_WORDS * 8);
    out = PyList_New(n);
    const char *p = (const char *)view.buf;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++, p += STEP_WORDS * 8) {
        long long w[STEP_WORDS];
        memcpy(w, p, sizeof(w)); /* the buffer need not be aligned */
        RawStep *r = raw_new();
        if (r == NULL) {
            Py_CLEAR(out);
            break;
        }
        r->step = w[0];
        r->start_ns = w[1];
        r->end_ns = w[2];
        memcpy(r->phase_ns, w + 3, sizeof(r->phase_ns));
        r->seen = w[3 + N_PHASES];
        r->rss_pages = w[4 + N_PHASES];
        r->comm_ns = w[5 + N_PHASES];
        PyList_SET_ITEM(out, i, (PyObject *)r);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef module_methods[] = {
    {"host_records", host_records, METH_VARARGS,
     "host_records(record_type, raws, rank, wall_offset_ns, page_mb): resolve.host_records."},
    {"ring_read", ring_read, METH_VARARGS,
     "ring_read(buffer, start): (the ring's steps from `start` as bytes, the next number)."},
    {"raw_unpack", raw_unpack, METH_O, "raw_unpack(data): RawSteps of ring_read's bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "traceml.instrument._native",
    .m_doc = "The step timer in C; traceml.instrument.timer is its reference and fallback.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    PyTypeObject *types[] = {&RawStepType, &TimerType, &TimedType, &EdgeType, &RootsType,
                             &StepType};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyType_Ready(types[i]) < 0) {
            return NULL;
        }
    }
    HOST = PyUnicode_InternFromString("host");
    BUSY = PyUnicode_InternFromString("busy");
    OWNER = PyUnicode_InternFromString("owner");
    if (HOST == NULL || BUSY == NULL || OWNER == NULL) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyModule_AddType(m, types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    /* timer.py checks these against its own before it uses this build. */
    if (PyModule_AddIntConstant(m, "RSS_INTERVAL_NS", RSS_INTERVAL_NS) < 0 ||
        PyModule_AddIntConstant(m, "N_PHASES", N_PHASES) < 0 ||
        PyModule_AddIntConstant(m, "BETWEEN", BETWEEN) < 0 ||
        PyModule_AddIntConstant(m, "OTHER", OTHER) < 0 ||
        PyModule_AddIntConstant(m, "STEP_WORDS", STEP_WORDS) < 0 ||
        PyModule_AddIntConstant(m, "RING_HEADER", RING_HEADER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
