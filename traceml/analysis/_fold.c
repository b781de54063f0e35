/* The per-step folds in C, twins of their Python references (which stay the spec):
 *
 *   timeline_fold  timeline._fold_columns (one window of the run's timeline);
 *   stats_fold     stats.WindowStats.add_many's step total, histogram and phase totals;
 *   block_fold     one block of stats.BlockSeries.add_many;
 *   series_fold    stats.BlockSeries._add_blocks with block_fold: a batch's blocks, found or
 *                  made, and folded;
 *   median_step_ms spikes.Baseline's rolling median (every 16 steps, of the last 64);
 *   spike_scan     store._judge_chunks: which steps of a batch are spikes, and the rolling
 *                  median after it;
 *   sketch_freeze  timeline.SortedSketch's p50, p95 and sorted buckets, as a window freezes;
 *   window_freeze  timeline._Open.freeze: a window's TimelineWindow, sketch and all;
 *   window_merge   timeline._Open.merge: one window folded into another (a halving);
 *   coalesce       stats._coalesce: a series' blocks re-keyed to a coarser stride (a halving);
 *   batch_facts    batch.batch_facts: what the store asks of a batch before folding it.
 *
 * Why C: every step a rank runs is folded on its tx thread, and every step of every rank in a
 * viewer. Column by column in Python these cost 1.7 us a step (benchmarks/fold.py), and 2-3x
 * that inside a training loop, where the tx thread's Python runs with cold caches and holds the
 * GIL the training thread waits for. One pass over the records here takes a fraction of that.
 *
 * Same floats: every accumulator receives the same additions in the same order as the Python
 * fold (a sum of a column from the running value, one value at a time), so the two agree to the
 * bit (tests/unit/test_fold_native.py runs both on random runs). Anything the C path does not
 * model (a record that is not a tuple of the expected shape, a step time that is not finite, an
 * accumulator that is not a float) makes it decline (False or None) before it changes anything,
 * and the caller folds in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* StepRecord's fields (records.StepRecord, a NamedTuple) */
#define F_STEP 1
#define F_STEP_MS 3
#define F_PHASES 4
#define F_RSS 6
#define F_RANK 0
#define F_DEV 7
#define F_COMM 10
#define F_HELD 11
#define RECORD_FIELDS 10 /* at least these: rank .. device_peak_mb */
#define EXACT_INT 9007199254740992.0 /* 2**53: whole numbers below it are exact as doubles */

/* An open window's slots (timeline._ID ... _PH; phase sums at PH + i, counts at PH + NP + i) */
#define S_ID 0
#define S_FIRST 1
#define S_LAST 2
#define S_N 3
#define S_SUM 4
#define S_MAX 5
#define S_RSS 6
#define S_RSS_N 7
#define S_DEV 8
#define S_DEV_N 9
#define S_PH 10
#define NP 7
#define SLOTS (S_PH + 2 * NP)

/* A number as the float a Python addition would use: floats as they are, ints converted. 0 when
 * the object is neither (the C path then declines). */
static int
as_double(PyObject *o, double *out)
{
    if (PyFloat_Check(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 1;
    }
    if (PyLong_Check(o)) {
        *out = PyLong_AsDouble(o);
        if (*out == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    return 0;
}

typedef struct {
    double sum;
    Py_ssize_t n;
} Column;

/* One optional value into a column: None is "not measured" and counts nothing. */
static int
add_opt(Column *c, PyObject *o)
{
    double v;
    if (o == Py_None) {
        return 1;
    }
    if (!as_double(o, &v)) {
        return 0;
    }
    c->sum += v;
    c->n += 1;
    return 1;
}

/* nums[at] = nums[at] + n (Python's addition: an int count stays an int, a float one a float). */
static int
add_count(PyObject *nums, Py_ssize_t at, Py_ssize_t n)
{
    PyObject *delta = PyLong_FromSsize_t(n);
    if (delta == NULL) {
        return -1;
    }
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(nums, at), delta);
    Py_DECREF(delta);
    if (sum == NULL) {
        return -1;
    }
    return PyList_SetItem(nums, at, sum); /* steals sum */
}

static int
set_float(PyObject *nums, Py_ssize_t at, double v)
{
    PyObject *f = PyFloat_FromDouble(v);
    return f == NULL ? -1 : PyList_SetItem(nums, at, f);
}

/* sketch[key] += count (insertion order: a new key goes in where Counter would put it). */
static int
sketch_add(PyObject *sketch, long key, Py_ssize_t count)
{
    PyObject *k = PyLong_FromLong(key);
    if (k == NULL) {
        return -1;
    }
    PyObject *old = PyDict_GetItemWithError(sketch, k); /* borrowed */
    PyObject *sum;
    if (old == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(k);
            return -1;
        }
        sum = PyLong_FromSsize_t(count);
    }
    else {
        PyObject *delta = PyLong_FromSsize_t(count);
        sum = delta == NULL ? NULL : PyNumber_Add(old, delta);
        Py_XDECREF(delta);
    }
    int rc = sum == NULL ? -1 : PyDict_SetItem(sketch, k, sum);
    Py_XDECREF(sum);
    Py_DECREF(k);
    return rc;
}

/* Counts into a dict of buckets, gathered in C first: a batch of a few hundred steps falls in a
 * few tens of buckets, so the dict takes one addition per bucket instead of one per step (each
 * an int object, a lookup and a store). The buckets are written in the order they were first
 * seen, so a new key goes into the dict where Counter, one step at a time, would have put it;
 * the counts are sums of ints either way. A batch with more distinct keys than AGG_KEYS writes
 * what it holds and goes on (keys already written keep their place). */
#define AGG_KEYS 64
#define AGG_SLOTS 128 /* a power of two, at least twice AGG_KEYS: probes stay short */
_Static_assert(AGG_SLOTS >= 2 * AGG_KEYS && (AGG_SLOTS & (AGG_SLOTS - 1)) == 0 && AGG_KEYS < 256,
               "an Agg needs free slots, a power-of-two mask and indices in an unsigned char");
typedef struct {
    PyObject *dict;
    Py_ssize_t n; /* distinct keys held, in first-seen order */
    long keys[AGG_KEYS];
    Py_ssize_t counts[AGG_KEYS];
    unsigned char slot[AGG_SLOTS]; /* 1 + index into keys; 0 for an empty slot */
} Agg;

static void
agg_init(Agg *a, PyObject *dict)
{
    a->dict = dict;
    a->n = 0;
    memset(a->slot, 0, sizeof a->slot);
}

static int
agg_flush(Agg *a)
{
    for (Py_ssize_t i = 0; i < a->n; i++) {
        if (sketch_add(a->dict, a->keys[i], a->counts[i]) < 0) {
            return -1;
        }
    }
    agg_init(a, a->dict);
    return 0;
}

static Py_ssize_t
agg_slot(long key)
{
    return (Py_ssize_t)(((unsigned long)key * 2654435761UL) & (AGG_SLOTS - 1));
}

static int
agg_add(Agg *a, long key)
{
    Py_ssize_t h = agg_slot(key);
    while (a->slot[h]) {
        Py_ssize_t at = a->slot[h] - 1;
        if (a->keys[at] == key) {
            a->counts[at]++;
            return 0;
        }
        h = (h + 1) & (AGG_SLOTS - 1);
    }
    if (a->n == AGG_KEYS) {
        if (agg_flush(a) < 0) {
            return -1;
        }
        h = agg_slot(key);
    }
    a->keys[a->n] = key;
    a->counts[a->n] = 1;
    a->slot[h] = (unsigned char)(a->n + 1);
    a->n++;
    return 0;
}

/* Checks shared by the folds: a StepRecord-shaped tuple with a finite step time and NP phases. */
static int
record_ok(PyObject *rec, double *ms)
{
    double step;
    return PyTuple_Check(rec) && PyTuple_GET_SIZE(rec) >= RECORD_FIELDS &&
           PyLong_Check(PyTuple_GET_ITEM(rec, F_STEP)) &&
           as_double(PyTuple_GET_ITEM(rec, F_STEP), &step) &&
           as_double(PyTuple_GET_ITEM(rec, F_STEP_MS), ms) && isfinite(*ms) &&
           PyTuple_Check(PyTuple_GET_ITEM(rec, F_PHASES)) &&
           PyTuple_GET_SIZE(PyTuple_GET_ITEM(rec, F_PHASES)) == NP;
}

/* A fold's `records, lo, hi` arguments: 1 for a non-empty slice of the list, 0 for any other
 * (the fold declines), -1 with an exception set. */
static int
slice_of(PyObject *records, PyObject *lo_obj, PyObject *hi_obj, Py_ssize_t *lo, Py_ssize_t *hi)
{
    *lo = PyLong_AsSsize_t(lo_obj);
    *hi = PyLong_AsSsize_t(hi_obj);
    if ((*lo == -1 || *hi == -1) && PyErr_Occurred()) {
        return -1;
    }
    return *lo >= 0 && *hi <= PyList_GET_SIZE(records) && *lo < *hi;
}

/* timeline._bucket: 0 for <= 0, else ceil(log(ms) / log(gamma)) shifted to be != 0. */
static long
bucket(double ms, double inv_log_gamma)
{
    if (ms <= 0) {
        return 0;
    }
    long key = (long)ceil(log(ms) * inv_log_gamma);
    return key > 0 ? key : key - 1;
}

static PyObject *
timeline_fold(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) ||
        !PyList_Check(args[2]) || !PyLong_Check(args[3]) || !PyLong_Check(args[4]) ||
        !PyFloat_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "timeline_fold(nums: list, sketch: dict, records: list, lo: int, hi: int, "
                        "inv_log_gamma: float)");
        return NULL;
    }
    PyObject *nums = args[0], *sketch = args[1], *records = args[2];
    double inv = PyFloat_AS_DOUBLE(args[5]);
    Py_ssize_t lo, hi;
    int ok = slice_of(records, args[3], args[4], &lo, &hi);
    if (ok < 0) {
        return NULL;
    }
    if (!ok || PyList_GET_SIZE(nums) != SLOTS) {
        Py_RETURN_FALSE;
    }
    double sum, top, first, last;
    Column rss = {0}, dev = {0}, ph[NP] = {{0}};
    if (!PyFloat_Check(PyList_GET_ITEM(nums, S_SUM)) ||
        !as_double(PyList_GET_ITEM(nums, S_MAX), &top) ||
        !as_double(PyList_GET_ITEM(nums, S_FIRST), &first) ||
        !as_double(PyList_GET_ITEM(nums, S_LAST), &last) ||
        !PyFloat_Check(PyList_GET_ITEM(nums, S_RSS)) ||
        !PyFloat_Check(PyList_GET_ITEM(nums, S_DEV))) {
        Py_RETURN_FALSE;
    }
    sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(nums, S_SUM));
    rss.sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(nums, S_RSS));
    dev.sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(nums, S_DEV));
    for (int k = 0; k < NP; k++) {
        if (!PyFloat_Check(PyList_GET_ITEM(nums, S_PH + k))) {
            Py_RETURN_FALSE;
        }
        ph[k].sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(nums, S_PH + k));
    }
    PyObject *first_obj = NULL, *last_obj = NULL, *top_obj = NULL; /* borrowed, from records */
    /* First pass: check every record, so that a decline changes nothing. */
    for (Py_ssize_t i = lo; i < hi; i++) {
        double ms = 0.0;
        if (!record_ok(PyList_GET_ITEM(records, i), &ms)) {
            Py_RETURN_FALSE;
        }
    }
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        PyObject *step_obj = PyTuple_GET_ITEM(rec, F_STEP);
        PyObject *ms_obj = PyTuple_GET_ITEM(rec, F_STEP_MS);
        PyObject *phases = PyTuple_GET_ITEM(rec, F_PHASES);
        double ms = 0.0, step = 0.0;
        as_double(ms_obj, &ms);
        as_double(step_obj, &step);
        sum += ms;
        if (ms > top) { /* max(): a later value replaces only when greater */
            top = ms;
            top_obj = ms_obj;
        }
        if (step < first) {
            first = step;
            first_obj = step_obj;
        }
        if (step > last) {
            last = step;
            last_obj = step_obj;
        }
        for (int k = 0; k < NP; k++) {
            if (!add_opt(&ph[k], PyTuple_GET_ITEM(phases, k))) {
                Py_RETURN_FALSE; /* nothing written yet */
            }
        }
        if (!add_opt(&rss, PyTuple_GET_ITEM(rec, F_RSS)) ||
            !add_opt(&dev, PyTuple_GET_ITEM(rec, F_DEV))) {
            Py_RETURN_FALSE;
        }
    }
    /* Write back: the same objects Python's min()/max() would keep. */
    if (add_count(nums, S_N, hi - lo) < 0 || set_float(nums, S_SUM, sum) < 0) {
        return NULL;
    }
    PyObject *keep[3] = {top_obj, first_obj, last_obj};
    int slot[3] = {S_MAX, S_FIRST, S_LAST};
    for (int i = 0; i < 3; i++) {
        if (keep[i] != NULL) {
            Py_INCREF(keep[i]);
            if (PyList_SetItem(nums, slot[i], keep[i]) < 0) {
                return NULL;
            }
        }
    }
    for (int k = 0; k < NP; k++) {
        if (ph[k].n > 0 && (set_float(nums, S_PH + k, ph[k].sum) < 0 ||
                            add_count(nums, S_PH + NP + k, ph[k].n) < 0)) {
            return NULL;
        }
    }
    if ((rss.n > 0 && (set_float(nums, S_RSS, rss.sum) < 0 || add_count(nums, S_RSS_N, rss.n) < 0)) ||
        (dev.n > 0 && (set_float(nums, S_DEV, dev.sum) < 0 || add_count(nums, S_DEV_N, dev.n) < 0))) {
        return NULL;
    }
    Agg agg;
    agg_init(&agg, sketch);
    for (Py_ssize_t i = lo; i < hi; i++) {
        double ms = 0.0;
        as_double(PyTuple_GET_ITEM(PyList_GET_ITEM(records, i), F_STEP_MS), &ms);
        if (agg_add(&agg, bucket(ms, inv)) < 0) {
            return NULL;
        }
    }
    if (agg_flush(&agg) < 0) {
        return NULL;
    }
    Py_RETURN_TRUE;
}

static int
floats_list(PyObject *o, Py_ssize_t n)
{
    if (!PyList_CheckExact(o) || PyList_GET_SIZE(o) != n) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyFloat_Check(PyList_GET_ITEM(o, i))) {
            return 0;
        }
    }
    return 1;
}

/* stats_fold(records, lo, hi, step_total, buckets, log_gamma, phase_ms, phase_step_ms,
 *            phase_counts) -> (step_total, hist_count, hist_zeros, rss_peak, device_seen) | None
 *
 * The part of stats.WindowStats.add_many that is per-step arithmetic: the running step total,
 * LogHistogram.add_many's buckets (updated in place; its count and zeros are returned to add),
 * PhaseTotals.add_many's three lists (in place), the largest host RSS (the first of equals, as
 * _peak) and whether any device field was measured. None, nothing changed, for input it does
 * not model (the caller folds in Python). */
static PyObject *
stats_fold(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9 || !PyList_Check(args[0]) || !PyLong_Check(args[1]) ||
        !PyLong_Check(args[2]) || !PyFloat_Check(args[3]) || !PyDict_CheckExact(args[4]) ||
        !PyFloat_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "stats_fold(records, lo, hi, step_total, buckets, log_gamma, phase_ms, "
                        "phase_step_ms, phase_counts)");
        return NULL;
    }
    PyObject *records = args[0], *buckets = args[4];
    PyObject *ph_ms = args[6], *ph_step = args[7], *ph_n = args[8];
    double total = PyFloat_AS_DOUBLE(args[3]), log_gamma = PyFloat_AS_DOUBLE(args[5]);
    Py_ssize_t lo, hi;
    int ok = slice_of(records, args[1], args[2], &lo, &hi);
    if (ok < 0) {
        return NULL;
    }
    if (!ok || !floats_list(ph_ms, NP) ||
        !floats_list(ph_step, NP) || !PyList_CheckExact(ph_n) || PyList_GET_SIZE(ph_n) != NP) {
        Py_RETURN_NONE;
    }
    Column ms_col[NP], step_col[NP];
    for (int k = 0; k < NP; k++) {
        ms_col[k].sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(ph_ms, k));
        step_col[k].sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(ph_step, k));
        ms_col[k].n = step_col[k].n = 0;
    }
    PyObject *rss_peak = NULL; /* borrowed */
    double rss_top = 0;
    int device = 0;
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        double ms = 0.0;
        if (!record_ok(rec, &ms)) {
            Py_RETURN_NONE;
        }
        PyObject *phases = PyTuple_GET_ITEM(rec, F_PHASES);
        for (int k = 0; k < NP; k++) {
            PyObject *v = PyTuple_GET_ITEM(phases, k);
            double x;
            if (v != Py_None && !as_double(v, &x)) {
                Py_RETURN_NONE;
            }
        }
        PyObject *rss = PyTuple_GET_ITEM(rec, F_RSS);
        double r;
        if (rss != Py_None && !as_double(rss, &r)) {
            Py_RETURN_NONE;
        }
    }
    for (Py_ssize_t i = lo; i < hi; i++) { /* nothing can fail from here on but memory */
        PyObject *rec = PyList_GET_ITEM(records, i);
        double ms = 0.0, x = 0.0;
        as_double(PyTuple_GET_ITEM(rec, F_STEP_MS), &ms);
        total += ms;
        PyObject *phases = PyTuple_GET_ITEM(rec, F_PHASES);
        for (int k = 0; k < NP; k++) {
            PyObject *v = PyTuple_GET_ITEM(phases, k);
            if (v != Py_None) {
                as_double(v, &x);
                ms_col[k].sum += x;
                ms_col[k].n += 1;
                step_col[k].sum += ms;
            }
        }
        PyObject *rss = PyTuple_GET_ITEM(rec, F_RSS);
        if (rss != Py_None) { /* max(): a later value replaces only when greater */
            as_double(rss, &x);
            if (rss_peak == NULL || x > rss_top) {
                rss_peak = rss;
                rss_top = x;
            }
        }
        for (int f = F_DEV; f <= F_DEV + 2; f++) { /* allocated, reserved, peak */
            device |= PyTuple_GET_ITEM(rec, f) != Py_None;
        }
    }
    for (int k = 0; k < NP; k++) {
        if (ms_col[k].n > 0 &&
            (set_float(ph_ms, k, ms_col[k].sum) < 0 || set_float(ph_step, k, step_col[k].sum) < 0 ||
             add_count(ph_n, k, ms_col[k].n) < 0)) {
            return NULL;
        }
    }
    /* LogHistogram.add_many: zeros (<= 0) apart, the others by ceil(log(v) / log(gamma)). */
    Py_ssize_t zeros = 0;
    Agg agg;
    agg_init(&agg, buckets);
    for (Py_ssize_t i = lo; i < hi; i++) {
        double ms = 0.0;
        as_double(PyTuple_GET_ITEM(PyList_GET_ITEM(records, i), F_STEP_MS), &ms);
        if (ms <= 0) {
            zeros++;
        }
        else if (agg_add(&agg, (long)ceil(log(ms) / log_gamma)) < 0) {
            return NULL;
        }
    }
    if (agg_flush(&agg) < 0) {
        return NULL;
    }
    return Py_BuildValue("(dnnOO)", total, hi - lo, zeros, rss_peak ? rss_peak : Py_None,
                         device ? Py_True : Py_False);
}

/* Fields of records[k] and of blocks[b] that the callers have checked (ints, floats). */
static double
rec_ms(PyObject *records, Py_ssize_t k)
{
    return PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(PyList_GET_ITEM(records, k), F_STEP_MS));
}

static long long
rec_step(PyObject *records, Py_ssize_t k)
{
    return PyLong_AsLongLong(PyTuple_GET_ITEM(PyList_GET_ITEM(records, k), F_STEP));
}

static double
block_id(PyObject *blocks, Py_ssize_t b)
{
    return PyFloat_AS_DOUBLE(PyList_GET_ITEM(PyList_GET_ITEM(blocks, b), 0));
}

/* Whether block_add models records[lo:hi]: StepRecords whose host RSS and device allocated are
 * None or numbers. */
static int
block_records_ok(PyObject *records, Py_ssize_t lo, Py_ssize_t hi)
{
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        double ms = 0.0, x = 0.0;
        if (!record_ok(rec, &ms)) {
            return 0;
        }
        PyObject *rss = PyTuple_GET_ITEM(rec, F_RSS), *dev = PyTuple_GET_ITEM(rec, F_DEV);
        if ((rss != Py_None && !as_double(rss, &x)) || (dev != Py_None && !as_double(dev, &x))) {
            return 0;
        }
    }
    return 1;
}

/* records[lo:hi] folded into `block` (a list of 9 floats: id, sum of steps, steps, then sum
 * and count of step ms, host RSS and device allocated), as BlockSeries.add_many adds one
 * block's slice; the caller has checked the records. -1 with an exception set. */
static int
block_add(PyObject *block, PyObject *records, Py_ssize_t lo, Py_ssize_t hi)
{
    static const int fields[3] = {F_STEP_MS, F_RSS, F_DEV};
    double steps = PyFloat_AS_DOUBLE(PyList_GET_ITEM(block, 1));
    Column ch[3];
    for (int c = 0; c < 3; c++) {
        ch[c].sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(block, 3 + 2 * c));
        ch[c].n = 0;
    }
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        double step = 0.0;
        as_double(PyTuple_GET_ITEM(rec, F_STEP), &step);
        steps += step;
        for (int c = 0; c < 3; c++) {
            add_opt(&ch[c], PyTuple_GET_ITEM(rec, fields[c]));
        }
    }
    if (set_float(block, 1, steps) < 0 || add_count(block, 2, hi - lo) < 0) {
        return -1;
    }
    for (int c = 0; c < 3; c++) {
        if (ch[c].n > 0 && (set_float(block, 3 + 2 * c, ch[c].sum) < 0 ||
                            add_count(block, 4 + 2 * c, ch[c].n) < 0)) {
            return -1;
        }
    }
    return 0;
}

/* block_fold(block, records, lo, hi) -> bool: stats.BlockSeries' block (a list: id, sum of
 * steps, steps, then sum and count of step ms, host RSS and device allocated) takes
 * records[lo:hi], as BlockSeries.add_many adds one block's slice. False, nothing changed, for
 * input it does not model. */
static PyObject *
block_fold(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyList_Check(args[1]) ||
        !PyLong_Check(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "block_fold(block: list, records: list, lo, hi)");
        return NULL;
    }
    PyObject *block = args[0], *records = args[1];
    Py_ssize_t lo, hi;
    int ok = slice_of(records, args[2], args[3], &lo, &hi);
    if (ok < 0) {
        return NULL;
    }
    if (!ok || !floats_list(block, 9) || !block_records_ok(records, lo, hi)) {
        Py_RETURN_FALSE;
    }
    if (block_add(block, records, lo, hi) < 0) {
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* series_fold(blocks, records, lo, hi, stride, capacity) -> int | None
 *
 * stats.BlockSeries._add_blocks over records[lo:hi] (ascending steps) with block_fold as its
 * fold: each run of steps of one block id (step // stride) goes into the block of that id in
 * `blocks` (sorted by id; a new one, [id, 0.0 ...], is inserted where it belongs). When a new
 * block makes them more than `capacity`, only the record that opened it is folded and the index
 * after it is returned: the caller halves the blocks (doubling the stride) and calls again from
 * there, as _add_blocks halves before its next step. Returns hi when all were folded; None,
 * nothing changed, for input it does not model (a record block_fold declines, a step that is
 * not an int >= 0, a block that is not 9 floats, an empty or inverted slice). */
static PyObject *
series_fold(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyList_Check(args[1]) ||
        !PyLong_Check(args[2]) || !PyLong_Check(args[3]) || !PyLong_Check(args[4]) ||
        !PyLong_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "series_fold(blocks: list, records: list, lo, hi, stride, capacity)");
        return NULL;
    }
    PyObject *blocks = args[0], *records = args[1];
    Py_ssize_t lo, hi;
    int ok = slice_of(records, args[2], args[3], &lo, &hi);
    long long stride = PyLong_AsLongLong(args[4]);
    Py_ssize_t capacity = PyLong_AsSsize_t(args[5]);
    if (ok < 0 || PyErr_Occurred()) {
        return NULL;
    }
    if (!ok || stride < 1) {
        Py_RETURN_NONE;
    }
    Py_ssize_t nb = PyList_GET_SIZE(blocks);
    for (Py_ssize_t b = 0; b < nb; b++) {
        if (!floats_list(PyList_GET_ITEM(blocks, b), 9)) {
            Py_RETURN_NONE;
        }
    }
    if (!block_records_ok(records, lo, hi)) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = lo; i < hi; i++) { /* record_ok checked they are ints */
        long long step = rec_step(records, i);
        if (step == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (step < 0) {
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t i = lo;
    while (i < hi) {
        long long bid = rec_step(records, i) / stride;
        Py_ssize_t j = i + 1;
        while (j < hi && rec_step(records, j) / stride == bid) {
            j++;
        }
        /* BlockSeries._block: from the end, the block of this id or where it goes */
        Py_ssize_t pos = PyList_GET_SIZE(blocks);
        while (pos > 0 && block_id(blocks, pos - 1) > (double)bid) {
            pos--;
        }
        PyObject *block;
        if (pos > 0 && block_id(blocks, pos - 1) == (double)bid) {
            block = PyList_GET_ITEM(blocks, pos - 1);
        } else {
            block = PyList_New(9);
            if (block == NULL) {
                return NULL;
            }
            for (Py_ssize_t k = 0; k < 9; k++) {
                PyObject *f = PyFloat_FromDouble(k == 0 ? (double)bid : 0.0);
                if (f == NULL) {
                    Py_DECREF(block);
                    return NULL;
                }
                PyList_SET_ITEM(block, k, f);
            }
            int inserted = PyList_Insert(blocks, pos, block);
            Py_DECREF(block); /* the list holds it */
            if (inserted < 0) {
                return NULL;
            }
        }
        int over = PyList_GET_SIZE(blocks) > capacity;
        if (over) {
            j = i + 1;
        }
        if (block_add(block, records, i, j) < 0) {
            return NULL;
        }
        if (over) {
            return PyLong_FromSsize_t(j);
        }
        i = j;
    }
    return PyLong_FromSsize_t(hi);
}

/* A record's step time as the medians model it: a finite float, never -0.0 (an order of equal
 * values may put -0.0 on either side of a 0.0, where Python's sort keeps them as they came, and
 * a median would then differ in its sign). `min_size`: the fields the caller reads. */
static int
scan_ms(PyObject *rec, Py_ssize_t min_size, double *out)
{
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < min_size) {
        return 0;
    }
    PyObject *ms = PyTuple_GET_ITEM(rec, F_STEP_MS);
    if (!PyFloat_Check(ms)) {
        return 0;
    }
    *out = PyFloat_AS_DOUBLE(ms);
    return isfinite(*out) && !(*out == 0.0 && signbit(*out));
}

/* The k-th smallest of v[0..n) (0-based), v reordered so that v[0..k) are all <= it: a
 * quickselect, linear where a sort (qsort's call per comparison) cost most of the scan. The
 * values are finite and never -0.0, so any order of the equal ones gives the same values. */
static double
select_kth(double *v, Py_ssize_t n, Py_ssize_t k)
{
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) {
                i++;
            }
            while (v[j] > pivot) {
                j--;
            }
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j) {
            hi = j;
        } else if (k >= i) {
            lo = i;
        } else {
            break; /* v[j+1..i) all equal the pivot, and k is among them */
        }
    }
    return v[k];
}

/* The median of v[0..n) (n >= 1; v is reordered): the middle value, or the mean of the two
 * middle ones, as spikes.median_step_ms takes them from its sorted list. */
static double
median_of(double *v, Py_ssize_t n)
{
    double upper = select_kth(v, n, n / 2);
    if (n % 2) {
        return upper;
    }
    double lower = v[0]; /* the largest of the lower half, all <= upper */
    for (Py_ssize_t k = 1; k < n / 2; k++) {
        lower = v[k] > lower ? v[k] : lower;
    }
    return (lower + upper) / 2;
}

#define SCAN_KEEP_MAX 512 /* the most values a window holds (Baseline's: 64) */

/* The last `keep` step times, as Baseline's bounded deque holds them. */
typedef struct {
    double v[SCAN_KEEP_MAX];
    Py_ssize_t keep, head, n; /* n values, from v[head] round */
} Window;

static void
window_push(Window *w, double x)
{
    w->v[(w->head + w->n) % w->keep] = x;
    if (w->n < w->keep) {
        w->n++;
    } else {
        w->head = (w->head + 1) % w->keep;
    }
}

static double
window_median(const Window *w, double *tmp)
{
    for (Py_ssize_t k = 0; k < w->n; k++) {
        tmp[k] = w->v[(w->head + k) % w->keep];
    }
    return median_of(tmp, w->n);
}

/* median_step_ms(records) -> float | None: the median step time of an iterable of at most 4,096
 * StepRecords (the middle one, or the mean of the two middle ones), as spikes.Baseline computes
 * it; None for input it does not model (no records, a step time that is not a finite float). */
static PyObject *
median_step_ms(PyObject *module, PyObject *records)
{
    (void)module;
    double values[4096];
    Py_ssize_t n = 0;
    PyObject *it = PyObject_GetIter(records);
    if (it == NULL) {
        return NULL;
    }
    PyObject *rec;
    int ok = 1;
    while ((rec = PyIter_Next(it)) != NULL) {
        double v;
        ok = ok && n < 4096 && scan_ms(rec, F_STEP_MS + 1, &v);
        if (ok) {
            values[n++] = v;
        }
        Py_DECREF(rec);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!ok || n == 0) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble(median_of(values, n));
}

/* spike_scan(recent, records, since, ms, factor, keep, every, least)
 *   -> ([(index, median), ...], since, ms, top) | None
 *
 * store.RunStore._judge_chunks and spikes.Baseline in one pass over a batch: records go in
 * chunks that end where the rolling median is recomputed (Baseline.steady); a record is a spike
 * when its step time less its held_ms is above factor x the median current for its chunk (only
 * looked at when some step time of the chunk is above it, as _above lets through); after each
 * chunk the window (the last `keep` step times, `recent` first) takes the chunk, and the median
 * is recomputed once `every` steps were observed, or once `least` were while there is none.
 * Returns each spike's index in `records` with the median it was judged against, the
 * Baseline's `_since` and `ms` after the batch (the caller updates the Baseline) and the
 * batch's largest step time. None, with nothing read changed, for what it does not model: a
 * step time that is not a finite float (or is -0.0), a held_ms that is neither None nor a
 * float, a `records` that is not a non-empty list. */
static PyObject *
spike_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "spike_scan takes 8 arguments");
        return NULL;
    }
    PyObject *recent = args[0], *records = args[1], *ms_arg = args[3];
    Py_ssize_t since = PyLong_AsSsize_t(args[2]);
    double factor = PyFloat_AsDouble(args[4]);
    Py_ssize_t keep = PyLong_AsSsize_t(args[5]);
    Py_ssize_t every = PyLong_AsSsize_t(args[6]);
    Py_ssize_t least = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_Check(records) || keep < 1 || keep > SCAN_KEEP_MAX || every < 1 || least < 1 ||
        (ms_arg != Py_None && !PyFloat_Check(ms_arg))) {
        Py_RETURN_NONE;
    }
    int have_ms = ms_arg != Py_None;
    double ms = have_ms ? PyFloat_AS_DOUBLE(ms_arg) : 0.0;
    Window w = {.keep = keep};
    double tmp[SCAN_KEEP_MAX];

    PyObject *it = PyObject_GetIter(recent);
    if (it == NULL) {
        return NULL;
    }
    PyObject *rec;
    int ok = 1;
    while ((rec = PyIter_Next(it)) != NULL) {
        double v;
        ok = ok && scan_ms(rec, F_STEP_MS + 1, &v);
        Py_DECREF(rec);
        if (ok) {
            window_push(&w, v);
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t total = PyList_GET_SIZE(records);
    double top = -INFINITY;
    for (Py_ssize_t i = 0; ok && i < total; i++) {
        double v;
        PyObject *r = PyList_GET_ITEM(records, i);
        ok = scan_ms(r, F_HELD + 1, &v) &&
             (PyTuple_GET_ITEM(r, F_HELD) == Py_None || PyFloat_Check(PyTuple_GET_ITEM(r, F_HELD)));
        top = ok && v > top ? v : top;
    }
    if (!ok || total == 0) {
        Py_RETURN_NONE;
    }

    PyObject *hits = PyList_New(0);
    if (hits == NULL) {
        return NULL;
    }
    Py_ssize_t i = 0;
    while (i < total) {
        Py_ssize_t left = every - since; /* Baseline.steady() */
        if (!have_ms && least - w.n < left) {
            left = least - w.n;
        }
        Py_ssize_t end = i + (left > 1 ? left : 1);
        if (end > total) {
            end = total;
        }
        if (have_ms) {
            double limit = factor * ms;
            int above = 0;
            for (Py_ssize_t k = i; k < end && !above; k++) {
                above = rec_ms(records, k) > limit;
            }
            for (Py_ssize_t k = i; above && k < end; k++) {
                PyObject *r = PyList_GET_ITEM(records, k);
                PyObject *held = PyTuple_GET_ITEM(r, F_HELD);
                double own = rec_ms(records, k);
                if (held != Py_None) {
                    own = own - PyFloat_AS_DOUBLE(held);
                }
                if (own > limit) {
                    PyObject *hit = Py_BuildValue("(nd)", k, ms);
                    if (hit == NULL || PyList_Append(hits, hit) < 0) {
                        Py_XDECREF(hit);
                        Py_DECREF(hits);
                        return NULL;
                    }
                    Py_DECREF(hit);
                }
            }
        }
        for (Py_ssize_t k = i; k < end; k++) { /* Baseline.observe_many */
            window_push(&w, rec_ms(records, k));
        }
        since += end - i;
        if (since >= every || (!have_ms && w.n >= least)) { /* Baseline._refresh */
            since = 0;
            ms = window_median(&w, tmp);
            have_ms = 1;
        }
        i = end;
    }
    if (have_ms) {
        return Py_BuildValue("(Nndd)", hits, since, ms, top);
    }
    return Py_BuildValue("(NnOd)", hits, since, Py_None, top);
}

typedef struct {
    long long key;
    PyObject *k; /* borrowed from the sketch dict */
    PyObject *n;
    long long count;
} Bucket;

static int
cmp_bucket(const void *a, const void *b)
{
    long long x = ((const Bucket *)a)->key, y = ((const Bucket *)b)->key;
    return (x > y) - (x < y);
}

/* timeline._bucket_value: the same operations in the same order, so the same float. */
static double
bucket_value(long long key, double gamma)
{
    if (key == 0) {
        return 0.0;
    }
    long long k = key > 0 ? key : key + 1;
    return 2 * pow(gamma, (double)k) / (gamma + 1);
}

/* Value of the rank-th smallest value: the first bucket whose running count passes `rank`
 * (the last bucket past the end), as SortedSketch._value_at_rank's bisect finds it. */
static double
value_at_rank(const Bucket *b, Py_ssize_t m, long long rank, double gamma)
{
    Py_ssize_t lo = 0, hi = m;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (b[mid].count > rank) {
            hi = mid;
        }
        else {
            lo = mid + 1;
        }
    }
    return bucket_value(b[lo < m ? lo : m - 1].key, gamma);
}

static double
sketch_quantile(const Bucket *b, Py_ssize_t m, long long count, double q, double gamma)
{
    double pos = q * (double)(count - 1);
    double lo = floor(pos);
    long long at = (long long)lo;
    double v_lo = value_at_rank(b, m, at, gamma);
    double v_hi = value_at_rank(b, m, at + 1 < count - 1 ? at + 1 : count - 1, gamma);
    return v_lo + (v_hi - v_lo) * (pos - lo);
}

/* A sketch's p50, p95 and (key, count) pairs sorted by key, as timeline.SortedSketch gives
 * them: 1 with *p50, *p95 and a new *pairs set; 0, nothing set and no error, for input it does
 * not model (no bucket, a key or count that is not an int in range, a count below 1); -1 on an
 * error. The pairs, and the tuple of them, are untracked: ints only, no cycle. */
static int
sketch_parts(PyObject *sketch, long long count, double gamma, double *p50, double *p95,
             PyObject **pairs)
{
    Py_ssize_t m = PyDict_GET_SIZE(sketch);
    if (count < 1 || m == 0) {
        return 0;
    }
    Bucket *b = PyMem_Malloc((size_t)m * sizeof(Bucket));
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *n;
    int ok = 1;
    while (ok && PyDict_Next(sketch, &pos, &k, &n)) {
        ok = PyLong_CheckExact(k) && PyLong_CheckExact(n);
        if (ok) {
            b[i].key = PyLong_AsLongLong(k);
            b[i].count = PyLong_AsLongLong(n);
            ok = !PyErr_Occurred();
            b[i].k = k;
            b[i].n = n;
            i++;
        }
    }
    if (!ok) {
        PyErr_Clear();
        PyMem_Free(b);
        return 0;
    }
    qsort(b, (size_t)m, sizeof(Bucket), cmp_bucket);
    PyObject *items = PyTuple_New(m);
    for (i = 0; items != NULL && i < m; i++) {
        PyObject *pair = PyTuple_Pack(2, b[i].k, b[i].n);
        if (pair == NULL) {
            Py_CLEAR(items);
            break;
        }
        PyObject_GC_UnTrack(pair); /* ints only: no cycle, and no work for the collector */
        PyTuple_SET_ITEM(items, i, pair);
        b[i].count += i > 0 ? b[i - 1].count : 0;
    }
    if (items != NULL) {
        PyObject_GC_UnTrack(items);
        *p50 = sketch_quantile(b, m, count, 0.5, gamma);
        *p95 = sketch_quantile(b, m, count, 0.95, gamma);
        *pairs = items;
    }
    PyMem_Free(b);
    return items != NULL ? 1 : -1;
}

/* sketch_freeze(sketch, count, gamma) -> (p50, p95, ((key, n), ...) sorted by key), as
 * timeline.SortedSketch gives them; None for input it does not model (sketch_parts). */
static PyObject *
sketch_freeze(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
        !PyFloat_CheckExact(args[2])) {
        Py_RETURN_NONE;
    }
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    double p50, p95;
    PyObject *pairs = NULL;
    int got = sketch_parts(args[0], count, PyFloat_AS_DOUBLE(args[2]), &p50, &p95, &pairs);
    if (got <= 0) {
        if (got == 0) {
            Py_RETURN_NONE;
        }
        return NULL;
    }
    return Py_BuildValue("(ddN)", p50, p95, pairs);
}

/* A float over a count, or None for a count of 0 (a column the window never measured). */
static PyObject *
mean_or_none(double sum, double count)
{
    return count != 0.0 ? PyFloat_FromDouble(sum / count) : Py_NewRef(Py_None);
}

/* window_freeze(nums, sketch, gamma, cls, names) -> cls instance | None: timeline._Open.freeze
 * in C. `cls` is TimelineWindow (a frozen dataclass with slots) and `names` its fields in
 * order; the instance is made as the dataclass's own __init__ makes it, a slot at a time past
 * its frozen __setattr__, without running that __init__'s Python (1.4 of its 3.7 us; the
 * phases' generator another 1.1). A heartbeat's live view freezes every window that took
 * steps since the last one, a few hundred on a fast loop: one GIL hold of several ms every
 * 5 s. None, nothing built, for what it does not model. */
static PyObject *
window_freeze(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    enum { FIELDS = 11 };
    if (nargs != 5 || !PyList_CheckExact(args[0]) || PyList_GET_SIZE(args[0]) != SLOTS ||
        !PyDict_CheckExact(args[1]) || !PyFloat_CheckExact(args[2]) || !PyType_Check(args[3]) ||
        !PyTuple_CheckExact(args[4]) || PyTuple_GET_SIZE(args[4]) != FIELDS) {
        Py_RETURN_NONE;
    }
    PyObject *nums = args[0];
    double v[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        /* Sums and the max are floats; the id, first and last step and the counts may be ints
         * (the fold stores steps as they come), taken only where a double holds them exactly. */
        PyObject *x = PyList_GET_ITEM(nums, i);
        int sum = i == S_SUM || i == S_MAX || i == S_RSS || i == S_DEV ||
                  (i >= S_PH && i < S_PH + NP);
        if (PyFloat_CheckExact(x)) {
            v[i] = PyFloat_AS_DOUBLE(x);
        }
        else if (!sum && PyLong_CheckExact(x)) {
            v[i] = PyLong_AsDouble(x);
            if ((v[i] == -1.0 && PyErr_Occurred()) || fabs(v[i]) >= EXACT_INT) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
        }
        else {
            Py_RETURN_NONE;
        }
    }
    /* A window holds at least one step, with finite first and last steps. */
    if (!(v[S_N] >= 1.0 && v[S_N] < EXACT_INT) || !isfinite(v[S_FIRST]) ||
        !isfinite(v[S_LAST])) {
        Py_RETURN_NONE;
    }
    double p50, p95;
    PyObject *pairs = NULL;
    long long n = (long long)v[S_N];
    int got = sketch_parts(args[1], n, PyFloat_AS_DOUBLE(args[2]), &p50, &p95, &pairs);
    if (got <= 0) {
        if (got == 0) {
            Py_RETURN_NONE;
        }
        return NULL;
    }
    PyObject *values[FIELDS] = {NULL};
    values[0] = PyLong_FromDouble(v[S_FIRST]);
    values[1] = PyLong_FromDouble(v[S_LAST]);
    values[2] = PyLong_FromLongLong(n);
    values[3] = PyFloat_FromDouble(v[S_SUM] / (double)n);
    /* min(p, max) as Python's min picks: the later value only when it is smaller. */
    values[4] = PyFloat_FromDouble(v[S_MAX] < p50 ? v[S_MAX] : p50);
    values[5] = PyFloat_FromDouble(v[S_MAX] < p95 ? v[S_MAX] : p95);
    values[6] = PyFloat_FromDouble(v[S_MAX]);
    values[7] = PyTuple_New(NP);
    for (int k = 0; values[7] != NULL && k < NP; k++) {
        PyObject *ms = mean_or_none(v[S_PH + k], v[S_PH + NP + k]);
        if (ms == NULL) {
            Py_CLEAR(values[7]);
            break;
        }
        PyTuple_SET_ITEM(values[7], k, ms);
    }
    values[8] = mean_or_none(v[S_RSS], v[S_RSS_N]);
    values[9] = mean_or_none(v[S_DEV], v[S_DEV_N]);
    values[10] = pairs;
    PyObject *out = NULL;
    for (int i = 0; i < FIELDS; i++) {
        if (values[i] == NULL) {
            goto done;
        }
    }
    PyTypeObject *cls = (PyTypeObject *)args[3];
    out = cls->tp_alloc(cls, 0);
    for (int i = 0; out != NULL && i < FIELDS; i++) {
        if (PyObject_GenericSetAttr(out, PyTuple_GET_ITEM(args[4], i), values[i]) < 0) {
            Py_CLEAR(out);
        }
    }
done:
    for (int i = 0; i < FIELDS; i++) {
        Py_XDECREF(values[i]);
    }
    return out;
}

/* batch_facts(records, mask) -> (rank, ascending, held, comm, due) | None: batch.batch_facts of
 * a non-empty list of StepRecords in one pass. None for what it does not model: an empty list,
 * a record that is not a tuple of every StepRecord field, a rank or step that is not an int (in
 * a C long long). */
static PyObject *
batch_facts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "batch_facts(records: list, mask: int)");
        return NULL;
    }
    PyObject *records = args[0];
    long long mask = PyLong_AsLongLong(args[1]);
    if (mask == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records), held = 0;
    long long rank = 0, prev = 0, due = -1;
    int same = 1, ascending = 1, comm = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) <= F_HELD ||
            !PyLong_Check(PyTuple_GET_ITEM(rec, F_RANK)) ||
            !PyLong_Check(PyTuple_GET_ITEM(rec, F_STEP))) {
            Py_RETURN_NONE;
        }
        long long r = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, F_RANK));
        long long step = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, F_STEP));
        if (PyErr_Occurred()) { /* an int beyond long long */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (i == 0) {
            rank = r;
        } else {
            same = same && r == rank;
            ascending = ascending && step > prev;
        }
        prev = step;
        if (!(step & mask)) {
            due = step;
        }
        held += PyTuple_GET_ITEM(rec, F_HELD) != Py_None;
        comm = comm || PyTuple_GET_ITEM(rec, F_COMM) != Py_None;
    }
    if (n == 0) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LNnNL)", same ? rank : -1LL, PyBool_FromLong(ascending), held,
                         PyBool_FromLong(comm), due);
}

/* window_merge(a_nums, a_sketch, b_nums, b_sketch) -> bool: timeline._Open.merge_py's
 * arithmetic in C: window b folded into window a (a's id kept; first, last and max the lesser
 * or greater object, as min() and max() pick them; every other slot a[i] + b[i]; b's sketch
 * counts added to a's, new buckets after a's in b's order). Collapsing an oversized sketch is
 * left to the caller. False, nothing changed, for input it does not model. A halving merges
 * 128 pairs of windows, each a Python loop over its sketch's buckets. */
static PyObject *
window_merge(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) ||
        !PyList_CheckExact(args[2]) || !PyDict_CheckExact(args[3]) || args[0] == args[2] ||
        args[1] == args[3] || PyList_GET_SIZE(args[0]) != SLOTS ||
        PyList_GET_SIZE(args[2]) != SLOTS) {
        Py_RETURN_FALSE;
    }
    PyObject *a = args[0], *sa = args[1], *b = args[2], *sb = args[3];
    for (int i = 0; i < SLOTS; i++) {
        PyObject *x = PyList_GET_ITEM(a, i), *y = PyList_GET_ITEM(b, i);
        if (!(PyFloat_CheckExact(x) || PyLong_CheckExact(x)) ||
            !(PyFloat_CheckExact(y) || PyLong_CheckExact(y))) {
            Py_RETURN_FALSE;
        }
    }
    Py_ssize_t pos = 0;
    PyObject *key, *n;
    while (PyDict_Next(sb, &pos, &key, &n)) {
        if (!PyLong_CheckExact(key) || !PyLong_CheckExact(n)) {
            Py_RETURN_FALSE;
        }
    }
    pos = 0;
    while (PyDict_Next(sa, &pos, &key, &n)) {
        if (!PyLong_CheckExact(n)) {
            Py_RETURN_FALSE;
        }
    }
    /* The slots that keep an object: min() keeps its first argument unless the second is
     * smaller, max() unless it is greater. */
    static const int kept_at[3] = {S_FIRST, S_LAST, S_MAX};
    static const int kept_op[3] = {Py_LT, Py_GT, Py_GT};
    PyObject *kept[3];
    for (int k = 0; k < 3; k++) {
        PyObject *x = PyList_GET_ITEM(a, kept_at[k]), *y = PyList_GET_ITEM(b, kept_at[k]);
        int swap = PyObject_RichCompareBool(y, x, kept_op[k]);
        if (swap < 0) {
            return NULL;
        }
        kept[k] = swap ? y : x; /* borrowed: a and b hold them */
    }
    PyObject *sums[SLOTS] = {NULL};
    for (int i = 0; i < SLOTS; i++) {
        if (i == S_ID || i == S_FIRST || i == S_LAST || i == S_MAX) {
            continue;
        }
        sums[i] = PyNumber_Add(PyList_GET_ITEM(a, i), PyList_GET_ITEM(b, i));
        if (sums[i] == NULL) {
            for (int j = 0; j < i; j++) {
                Py_XDECREF(sums[j]);
            }
            return NULL;
        }
    }
    for (int k = 0; k < 3; k++) {
        sums[kept_at[k]] = Py_NewRef(kept[k]);
    }
    for (int i = 0; i < SLOTS; i++) {
        if (sums[i] != NULL) {
            PyObject *old = PyList_GET_ITEM(a, i);
            PyList_SET_ITEM(a, i, sums[i]);
            Py_DECREF(old);
        }
    }
    pos = 0;
    while (PyDict_Next(sb, &pos, &key, &n)) {
        PyObject *cur = PyDict_GetItemWithError(sa, key);
        if (cur == NULL && PyErr_Occurred()) {
            return NULL;
        }
        PyObject *total = cur != NULL ? PyNumber_Add(cur, n) : Py_NewRef(n);
        if (total == NULL || PyDict_SetItem(sa, key, total) < 0) {
            Py_XDECREF(total);
            return NULL;
        }
        Py_DECREF(total);
    }
    Py_RETURN_TRUE;
}

/* One block of a series, checked: an exact list of `width` exact floats whose first item (the
 * block id) is a whole number in [0, 2**53). Sets *id. */
static int
block_ok(PyObject *block, Py_ssize_t width, long long *id)
{
    if (!PyList_CheckExact(block) || PyList_GET_SIZE(block) != width) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < width; k++) {
        if (!PyFloat_CheckExact(PyList_GET_ITEM(block, k))) {
            return 0;
        }
    }
    double v = PyFloat_AS_DOUBLE(PyList_GET_ITEM(block, 0));
    if (!(v >= 0.0 && v < EXACT_INT) || v != floor(v)) {
        return 0;
    }
    *id = (long long)v;
    return 1;
}

/* coalesce(blocks, factor) -> list | None, as stats._coalesce: blocks (sorted by id) re-keyed
 * to id // factor, neighbours that land on the same id summed item by item (the later block's
 * values added to the earlier's, as the Python does), the others copied with their new id.
 * None, nothing built, for input it does not model. A halving merges 128 pairs of blocks; in
 * Python that was a comprehension per pair, and a 0.4 ms loop's segments halve several times
 * every 10,000 steps. */
static PyObject *
coalesce(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        Py_RETURN_NONE;
    }
    long long factor = PyLong_AsLongLong(args[1]);
    if (factor < 1) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *blocks = args[0];
    Py_ssize_t n = PyList_GET_SIZE(blocks);
    Py_ssize_t width = n ? PyList_GET_SIZE(PyList_GET_ITEM(blocks, 0)) : 0;
    long long id;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (width < 1 || !block_ok(PyList_GET_ITEM(blocks, i), width, &id)) {
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(0);
    PyObject *last = NULL; /* borrowed from out */
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *block = PyList_GET_ITEM(blocks, i);
        block_ok(block, width, &id);
        double bid = (double)(id / factor);
        if (last != NULL && PyFloat_AS_DOUBLE(PyList_GET_ITEM(last, 0)) == bid) {
            for (Py_ssize_t k = 1; k < width; k++) {
                double sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(last, k)) +
                             PyFloat_AS_DOUBLE(PyList_GET_ITEM(block, k));
                PyObject *v = PyFloat_FromDouble(sum);
                if (v == NULL) {
                    Py_CLEAR(out);
                    break;
                }
                PyObject *old = PyList_GET_ITEM(last, k);
                PyList_SET_ITEM(last, k, v);
                Py_DECREF(old);
            }
            continue;
        }
        PyObject *copy = PyList_New(width);
        PyObject *head = copy != NULL ? PyFloat_FromDouble(bid) : NULL;
        if (head == NULL || PyList_Append(out, copy) < 0) {
            Py_XDECREF(head);
            Py_XDECREF(copy);
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(copy, 0, head);
        for (Py_ssize_t k = 1; k < width; k++) {
            PyList_SET_ITEM(copy, k, Py_NewRef(PyList_GET_ITEM(block, k)));
        }
        Py_DECREF(copy); /* out holds it */
        last = copy;
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"timeline_fold", (PyCFunction)(void (*)(void))timeline_fold, METH_FASTCALL,
     "Fold records[lo:hi] (one window's, ascending or not) into the window's nums and sketch, "
     "as timeline._fold_columns does; False (nothing changed) for input it does not model."},
    {"stats_fold", (PyCFunction)(void (*)(void))stats_fold, METH_FASTCALL,
     "WindowStats.add_many's step total, histogram and phase totals over records[lo:hi]."},
    {"block_fold", (PyCFunction)(void (*)(void))block_fold, METH_FASTCALL,
     "One BlockSeries block's share of records[lo:hi], as BlockSeries.add_many adds it."},
    {"series_fold", (PyCFunction)(void (*)(void))series_fold, METH_FASTCALL,
     "BlockSeries._add_blocks over records[lo:hi] with block_fold: the index it stopped at (hi, "
     "or after a block too many, to halve); None to decline."},
    {"median_step_ms", median_step_ms, METH_O,
     "The median step_ms of the records, as spikes.Baseline computes it; None to decline."},
    {"spike_scan", (PyCFunction)(void (*)(void))spike_scan, METH_FASTCALL,
     "Spikes of a batch and the rolling median after it, as RunStore._judge_chunks finds them; "
     "None to decline."},
    {"batch_facts", (PyCFunction)(void (*)(void))batch_facts, METH_FASTCALL,
     "(rank or -1, ascending, held, comm, due) of a batch of StepRecords, as batch.batch_facts; "
     "None to decline."},
    {"sketch_freeze", (PyCFunction)(void (*)(void))sketch_freeze, METH_FASTCALL,
     "(p50, p95, sorted (key, count) pairs) of a timeline sketch; None to decline."},
    {"window_freeze", (PyCFunction)(void (*)(void))window_freeze, METH_FASTCALL,
     "A timeline window's TimelineWindow, as timeline._Open.freeze makes it; None to decline."},
    {"window_merge", (PyCFunction)(void (*)(void))window_merge, METH_FASTCALL,
     "Window b's nums and sketch folded into window a's, as timeline._Open.merge_py does "
     "(without collapsing the sketch); False (nothing changed) to decline."},
    {"coalesce", (PyCFunction)(void (*)(void))coalesce, METH_FASTCALL,
     "A series' blocks re-keyed to id // factor, neighbours on one id summed, as "
     "stats._coalesce; None to decline."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fold_module = {
    PyModuleDef_HEAD_INIT,
    "traceml.analysis._fold",
    "The per-step folds in C (timeline.py and stats.py hold the Python references).",
    0,
    module_methods,
};

PyMODINIT_FUNC
PyInit__fold(void)
{
    PyObject *m = PyModule_Create(&fold_module);
    if (m == NULL) {
        return NULL;
    }
    /* Where the folds read a StepRecord's fields: native.py compares it with records.py's. */
    PyObject *layout = Py_BuildValue(
        "((si)(si)(si)(si)(si)(si)(si)(si)(si)(si))", "rank", F_RANK, "step", F_STEP, "step_ms",
        F_STEP_MS, "phases", F_PHASES, "host_rss_mb", F_RSS, "device_allocated_mb", F_DEV,
        "device_reserved_mb", F_DEV + 1, "device_peak_mb", F_DEV + 2, "comm_wait_ms", F_COMM,
        "held_ms", F_HELD);
    if (layout == NULL || PyModule_AddObject(m, "RECORD_LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "SLOTS", SLOTS) < 0 ||
        PyModule_AddIntConstant(m, "N_PHASES", NP) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
