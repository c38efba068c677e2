/* The confluent engine's per-message tracking, in C: portable_kafka._speedups.
 *
 * A consumer at full rate turns every librdkafka Message into the delivery the
 * application gets (a _Delivery, portable_kafka._receive). The Python loop that does it
 * (ConfluentSubscription._track_consumed, kept as the fallback and as the
 * reference this file must match) costs about 0.65 us a message, as much as
 * librdkafka's own consume. This file does the common message (no headers, or only
 * the application's) in C and calls back into Python for everything else: a
 * partition's first message of a batch, a record of this driver's own headers (a
 * retry copy), an error.
 *
 * It reads nothing private of confluent-kafka: it calls the Message type's public
 * methods (error, topic, partition, offset, headers, timestamp, value, key) through
 * their method descriptors, after bind() checked each is a no-argument C method. It
 * writes the _Delivery's slots through the member descriptors Python made for
 * them, after bind() checked each is an object slot of that type.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

enum {
    F_BODY, F_TOMBSTONE, F_KEY, F_KEY_BYTES, F_ID, F_ATTRIBUTES, F_STAMPED, F_ATTEMPT,
    F_HANDLE, F_HEADERS, F_TP, F_OFFSET, F_DUE, F_BATCH, F_LEASE_ENDS, NFIELDS
};
static const char *FIELD_NAMES[NFIELDS] = {
    "_body", "_tombstone", "_key", "_key_bytes", "_id", "_attributes", "_stamped", "_attempt",
    "_handle", "_headers", "tp", "offset", "due", "batch", "lease_ends",
};
static Py_ssize_t field_offset[NFIELDS];
static PyTypeObject *delivery_type = NULL;

/* _LeaseBatch's slots */
enum { B_ITEMS, B_LEFT, NBATCH };
static const char *BATCH_NAMES[NBATCH] = {"items", "left"};
static Py_ssize_t batch_offset[NBATCH];
static PyTypeObject *batch_type = NULL;

enum { M_ERROR, M_TOPIC, M_PARTITION, M_OFFSET, M_HEADERS, M_VALUE, M_KEY, NMETHODS };
static const char *METHOD_NAMES[NMETHODS] = {
    "error", "topic", "partition", "offset", "headers", "value", "key",
};
static PyCFunction method_fn[NMETHODS];
static PyTypeObject *message_type = NULL;

static PyObject *empty_bytes = NULL;
static PyObject *empty_tuple = NULL;
static PyObject *one = NULL;
static PyObject *zero_float = NULL;
static PyObject *str_add_fetched = NULL;

#define CALL(m, msg) (method_fn[m]((msg), NULL))

/* Store ``value`` (a new reference, stolen) in a delivery's slot ``i``. */
static inline void
set_field(PyObject *obj, int i, PyObject *value)
{
    PyObject **slot = (PyObject **)((char *)obj + field_offset[i]);
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* A delivery's slot ``i`` (borrowed), or NULL with AttributeError when it is not set. */
static inline PyObject *
get_field(PyObject *obj, int i)
{
    PyObject *value = *(PyObject **)((char *)obj + field_offset[i]);
    if (value == NULL)
        PyErr_Format(PyExc_AttributeError, "a delivery without %s", FIELD_NAMES[i]);
    return value;
}

static inline PyObject **
batch_slot(PyObject *batch, int i)
{
    return (PyObject **)((char *)batch + batch_offset[i]);
}

/* The offsets of writable object slots ``names`` of ``type``, or -1 with TypeError. */
static int
slot_offsets(PyTypeObject *type, const char **names, int n, Py_ssize_t *offsets)
{
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString((PyObject *)type, names[i]);
        if (descr == NULL)
            return -1;
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type);
        PyMemberDef *member = ok ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        ok = ok && member->type == T_OBJECT_EX && !(member->flags & READONLY)
             && PyType_IsSubtype(type, PyDescr_TYPE(descr));
        if (ok)
            offsets[i] = member->offset;
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name, names[i]);
            return -1;
        }
    }
    return 0;
}

/* bind(delivery_type, batch_type, message_type): the slots of _Delivery and _LeaseBatch to
 * read and write, and the confluent-kafka Message methods to call (message_type None: no
 * track(), for the kafka-python engine). */
static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !(args[2] == Py_None || PyType_Check(args[2]))) {
        PyErr_SetString(PyExc_TypeError, "bind(delivery_type, batch_type, message_type or None)");
        return NULL;
    }
    PyTypeObject *dtype = (PyTypeObject *)args[0];
    PyTypeObject *btype = (PyTypeObject *)args[1];
    Py_ssize_t offsets[NFIELDS], boffsets[NBATCH];
    PyCFunction methods[NMETHODS];
    if (slot_offsets(dtype, FIELD_NAMES, NFIELDS, offsets) < 0 || slot_offsets(btype, BATCH_NAMES, NBATCH, boffsets) < 0)
        return NULL;
    if (args[2] != Py_None) {
        PyTypeObject *mtype = (PyTypeObject *)args[2];
        for (int i = 0; i < NMETHODS; i++) {
            PyObject *descr = PyObject_GetAttrString((PyObject *)mtype, METHOD_NAMES[i]);
            if (descr == NULL)
                return NULL;
            int ok = Py_IS_TYPE(descr, &PyMethodDescr_Type);
            PyMethodDef *def = ok ? ((PyMethodDescrObject *)descr)->d_method : NULL;
            ok = ok && (def->ml_flags & (METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O | METH_FASTCALL | METH_METHOD)) == METH_NOARGS
                 && !(def->ml_flags & (METH_CLASS | METH_STATIC));
            if (ok)
                methods[i] = def->ml_meth;
            Py_DECREF(descr);
            if (!ok) {
                PyErr_Format(PyExc_TypeError, "%s.%s is not a method without arguments", mtype->tp_name, METHOD_NAMES[i]);
                return NULL;
            }
        }
        memcpy(method_fn, methods, sizeof(methods));
        Py_INCREF(mtype);
        Py_XSETREF(message_type, mtype);
    }
    memcpy(field_offset, offsets, sizeof(offsets));
    memcpy(batch_offset, boffsets, sizeof(boffsets));
    Py_INCREF(dtype);
    Py_XSETREF(delivery_type, dtype);
    Py_INCREF(btype);
    Py_XSETREF(batch_type, btype);
    Py_RETURN_NONE;
}

/* The text view of a record's headers when all are the application's: a new dict, or
 * Py_None (a new reference) when one is this driver's own (``prefix``) or has a null
 * value, for the full path. As plain_attributes in _receive.py. */
static PyObject *
plain_attributes(PyObject *headers, PyObject *prefix)
{
    PyObject *attributes = PyDict_New();
    if (attributes == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(headers);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(headers, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            goto full_path;
        PyObject *name = PyTuple_GET_ITEM(pair, 0);
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(value))
            goto full_path;  /* a null value (None) too */
        int internal = PyUnicode_Tailmatch(name, prefix, 0, PY_SSIZE_T_MAX, -1);
        if (internal < 0)
            goto fail;
        if (internal)
            goto full_path;
        PyObject *text = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), NULL);
        if (text == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto fail;
            PyErr_Clear();
            /* not text: only in headers (an earlier text value is not the last) */
            if (PyDict_DelItem(attributes, name) < 0) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError))
                    goto fail;
                PyErr_Clear();
            }
            continue;
        }
        int failed = PyDict_SetItem(attributes, name, text);
        Py_DECREF(text);
        if (failed)
            goto fail;
    }
    return attributes;
full_path:
    Py_DECREF(attributes);
    Py_RETURN_NONE;
fail:
    Py_DECREF(attributes);
    return NULL;
}

/* ``prefix`` + the decimal ``offset``: the record id (portable_kafka._records.record_id). */
static PyObject *
record_id(PyObject *prefix, long long offset)
{
    char buffer[24];
    char *end = buffer + sizeof(buffer), *digits = end;
    unsigned long long left = offset < 0 ? 0ULL - (unsigned long long)offset : (unsigned long long)offset;
    do {
        *--digits = (char)('0' + left % 10);
        left /= 10;
    } while (left);
    if (offset < 0)
        *--digits = '-';
    int n = (int)(end - digits);
    if (PyUnicode_IS_COMPACT_ASCII(prefix)) {
        Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
        PyObject *id = PyUnicode_New(plen + n, 127);
        if (id == NULL)
            return NULL;
        memcpy(PyUnicode_1BYTE_DATA(id), PyUnicode_1BYTE_DATA(prefix), plen);
        memcpy(PyUnicode_1BYTE_DATA(id) + plen, digits, n);
        return id;
    }
    PyObject *tail = PyUnicode_FromStringAndSize(digits, n);
    if (tail == NULL)
        return NULL;
    PyObject *id = PyUnicode_Concat(prefix, tail);
    Py_DECREF(tail);
    return id;
}

/* The partition run being tracked: the current partition's bookkeeping. */
typedef struct {
    PyObject *topic;     /* the run's topic (str), or NULL before the first */
    long partition;
    PyObject *tp;        /* the bookkeeping's TopicPartition */
    PyObject *progress;  /* its PartitionProgress, or Py_None when revoked meanwhile */
    PyObject *prefix;    /* "topic/partition/" */
    long long last;      /* the highest offset fetched */
    PyObject *fetched;   /* the run's new offsets (a list), for progress.add_fetched */
} Run;

/* Hand the run's new offsets to its progress (keeping a pending exception). */
static int
flush(Run *run)
{
    if (run->fetched == NULL || PyList_GET_SIZE(run->fetched) == 0 || run->progress == NULL
        || run->progress == Py_None)
        return 0;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *done = PyObject_CallMethodOneArg(run->progress, str_add_fetched, run->fetched);
    int failed = done == NULL;
    Py_XDECREF(done);
    if (exc_type != NULL) {
        if (failed)
            PyErr_Clear();
        PyErr_Restore(exc_type, exc_value, exc_tb);
        return -1;
    }
    if (failed)
        return -1;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return -1;
    Py_SETREF(run->fetched, fresh);
    return 0;
}

static void
clear_run(Run *run)
{
    Py_CLEAR(run->topic);
    Py_CLEAR(run->tp);
    Py_CLEAR(run->progress);
    Py_CLEAR(run->prefix);
    Py_CLEAR(run->fetched);
}

/* track(messages, out, handles, on_partition, on_headers, on_error, no_attributes, internal_prefix, untrack)
 *
 * Append to ``out`` the delivery of each new message of ``messages`` (a list of
 * confluent_kafka Messages), in order; with ``untrack`` true, the deliveries made here are
 * left untracked by the cycle collector (see retrack below: the caller owns that promise).
 * Calls back:
 *   on_partition(topic, partition) -> None (revoked: skip its messages) or
 *       (tp, progress, prefix, last_fetched), at each partition run;
 *   on_headers(message, tp, offset, headers) -> a delivery to append, or None (held),
 *       for a record with headers of this driver's own (a retry copy) or a null value;
 *   on_error(error) -> None to skip the message (or it raises);
 * Each partition run's new offsets go to its progress's add_fetched, also when a
 * callback raises (``out`` then holds the deliveries made before it). */
static PyObject *
track(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "track takes 9 arguments");
        return NULL;
    }
    PyObject *messages = args[0], *out = args[1], *handles = args[2], *on_partition = args[3];
    PyObject *on_headers = args[4], *on_error = args[5], *no_attributes = args[6], *internal = args[7];
    int untrack = PyObject_IsTrue(args[8]);
    if (untrack < 0)
        return NULL;
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() with the Message type first");
        return NULL;
    }
    if (!PyList_CheckExact(messages) || !PyList_CheckExact(out) || !PyUnicode_Check(internal)) {
        PyErr_SetString(PyExc_TypeError, "track(messages: list, out: list, ..., internal_prefix: str)");
        return NULL;
    }
    iternextfunc next_handle = Py_TYPE(handles)->tp_iternext;
    if (next_handle == NULL) {
        PyErr_SetString(PyExc_TypeError, "handles must be an iterator");
        return NULL;
    }
    Run run = {NULL, -1, NULL, NULL, NULL, -1, NULL};
    run.fetched = PyList_New(0);
    if (run.fetched == NULL)
        goto fail;

    Py_ssize_t n = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(messages, i);
        if (!Py_IS_TYPE(msg, message_type)) {
            PyErr_Format(PyExc_TypeError, "track: a %s, not a %s", Py_TYPE(msg)->tp_name, message_type->tp_name);
            goto fail;
        }
        PyObject *err = CALL(M_ERROR, msg);
        if (err == NULL)
            goto fail;
        if (err != Py_None) {
            if (flush(&run) < 0) {
                Py_DECREF(err);
                goto fail;
            }
            PyObject *skip = PyObject_CallOneArg(on_error, err);
            Py_DECREF(err);
            if (skip == NULL)
                goto fail;
            Py_DECREF(skip);
            continue;
        }
        Py_DECREF(err);

        PyObject *partition_obj = CALL(M_PARTITION, msg);
        if (partition_obj == NULL)
            goto fail;
        long partition = PyLong_AsLong(partition_obj);
        if (partition == -1 && PyErr_Occurred()) {
            Py_DECREF(partition_obj);
            goto fail;
        }
        PyObject *topic = CALL(M_TOPIC, msg);
        if (topic == NULL) {
            Py_DECREF(partition_obj);
            goto fail;
        }
        int same = 0;
        if (run.topic != NULL && partition == run.partition) {
            same = topic == run.topic
                   || (PyUnicode_CheckExact(topic) && PyUnicode_CheckExact(run.topic)
                       && PyUnicode_GET_LENGTH(topic) == PyUnicode_GET_LENGTH(run.topic)
                       && PyUnicode_KIND(topic) == PyUnicode_KIND(run.topic)
                       && memcmp(PyUnicode_DATA(topic), PyUnicode_DATA(run.topic),
                                 PyUnicode_GET_LENGTH(topic) * PyUnicode_KIND(topic)) == 0);
        }
        if (!same) {
            if (flush(&run) < 0) {
                Py_DECREF(partition_obj);
                Py_DECREF(topic);
                goto fail;
            }
            PyObject *info = PyObject_CallFunctionObjArgs(on_partition, topic, partition_obj, NULL);
            Py_DECREF(partition_obj);
            if (info == NULL) {
                Py_DECREF(topic);
                goto fail;
            }
            Py_XSETREF(run.topic, topic);
            run.partition = partition;
            if (info == Py_None) {
                Py_DECREF(info);
                Py_CLEAR(run.tp);
                Py_CLEAR(run.prefix);
                Py_XSETREF(run.progress, Py_NewRef(Py_None));
                continue;
            }
            if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 4 || !PyUnicode_Check(PyTuple_GET_ITEM(info, 2))) {
                Py_DECREF(info);
                PyErr_SetString(PyExc_TypeError, "on_partition returns None or (tp, progress, prefix, last)");
                goto fail;
            }
            long long last = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 3));
            if (last == -1 && PyErr_Occurred()) {
                Py_DECREF(info);
                goto fail;
            }
            Py_XSETREF(run.tp, Py_NewRef(PyTuple_GET_ITEM(info, 0)));
            Py_XSETREF(run.progress, Py_NewRef(PyTuple_GET_ITEM(info, 1)));
            Py_XSETREF(run.prefix, Py_NewRef(PyTuple_GET_ITEM(info, 2)));
            run.last = last;
            Py_DECREF(info);
        }
        else {
            Py_DECREF(partition_obj);
            Py_DECREF(topic);
        }
        if (run.progress == Py_None)
            continue;  /* revoked meanwhile */

        PyObject *offset_obj = CALL(M_OFFSET, msg);
        if (offset_obj == NULL)
            goto fail;
        long long offset = PyLong_AsLong(offset_obj);
        if (offset == -1 && PyErr_Occurred()) {
            Py_DECREF(offset_obj);
            goto fail;
        }
        if (offset <= run.last) {  /* a refetch */
            Py_DECREF(offset_obj);
            continue;
        }
        run.last = offset;
        if (PyList_Append(run.fetched, offset_obj) < 0) {
            Py_DECREF(offset_obj);
            goto fail;
        }

        PyObject *attributes, *headers;
        PyObject *raw_headers = CALL(M_HEADERS, msg);
        if (raw_headers == NULL) {
            Py_DECREF(offset_obj);
            goto fail;
        }
        if (PyList_CheckExact(raw_headers) && PyList_GET_SIZE(raw_headers) > 0) {
            attributes = plain_attributes(raw_headers, internal);
            if (attributes == NULL) {
                Py_DECREF(raw_headers);
                Py_DECREF(offset_obj);
                goto fail;
            }
            if (attributes == Py_None) {  /* a retry copy, or a null value: the full path */
                Py_DECREF(attributes);
                PyObject *delivery = PyObject_CallFunctionObjArgs(on_headers, msg, run.tp, offset_obj, raw_headers, NULL);
                Py_DECREF(raw_headers);
                Py_DECREF(offset_obj);
                if (delivery == NULL)
                    goto fail;
                int failed = delivery != Py_None && PyList_Append(out, delivery) < 0;
                Py_DECREF(delivery);
                if (failed)
                    goto fail;
                continue;
            }
            headers = PyList_AsTuple(raw_headers);
            Py_DECREF(raw_headers);
            if (headers == NULL) {
                Py_DECREF(attributes);
                Py_DECREF(offset_obj);
                goto fail;
            }
        }
        else if (raw_headers == Py_None || PyList_CheckExact(raw_headers)) {
            Py_DECREF(raw_headers);
            attributes = Py_NewRef(no_attributes);
            headers = Py_NewRef(empty_tuple);
        }
        else {
            Py_DECREF(raw_headers);
            Py_DECREF(offset_obj);
            PyErr_SetString(PyExc_TypeError, "Message.headers() returned neither a list nor None");
            goto fail;
        }

        PyObject *delivery = delivery_type->tp_alloc(delivery_type, 0);
        if (delivery == NULL) {
            Py_DECREF(attributes);
            Py_DECREF(headers);
            Py_DECREF(offset_obj);
            goto fail;
        }
        /* from here on every field lands in the delivery, which owns it */
        set_field(delivery, F_ATTRIBUTES, attributes);
        set_field(delivery, F_HEADERS, headers);
        set_field(delivery, F_OFFSET, offset_obj);
        set_field(delivery, F_TP, Py_NewRef(run.tp));
        /* publish_time: read from it when asked. The delivery keeps the record alive for its
         * lifetime, so the cycle collector would meet it in every collection it survives (a
         * third of consume's time went to collections at full rate); it refers only to str,
         * bytes, ints and a list of (str, bytes), so it can be in no cycle: untracked. So is
         * the delivery itself when asked (``untrack``): it refers to its lease batch and
         * settler, which refer back to it while it is in flight, so the caller retracks every
         * delivery it still holds before its graph can become garbage (retrack()). */
        PyObject_GC_UnTrack(msg);
        if (untrack)
            PyObject_GC_UnTrack(delivery);
        set_field(delivery, F_STAMPED, Py_NewRef(msg));
        set_field(delivery, F_ATTEMPT, Py_NewRef(one));
        set_field(delivery, F_DUE, Py_NewRef(zero_float));
        PyObject *value = CALL(M_VALUE, msg);
        if (value == NULL)
            goto fail_delivery;
        if (value == Py_None) {  /* a tombstone, read as b"" */
            Py_DECREF(value);
            set_field(delivery, F_BODY, Py_NewRef(empty_bytes));
            set_field(delivery, F_TOMBSTONE, Py_NewRef(Py_True));
        }
        else {
            set_field(delivery, F_BODY, value);
            set_field(delivery, F_TOMBSTONE, Py_NewRef(Py_False));
        }
        PyObject *key = CALL(M_KEY, msg);
        if (key == NULL)
            goto fail_delivery;
        if (key == Py_None) {
            set_field(delivery, F_KEY, Py_NewRef(Py_None));
            set_field(delivery, F_KEY_BYTES, key);
        }
        else {
            set_field(delivery, F_KEY_BYTES, key);
            if (!PyBytes_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "Message.key() is not bytes");
                goto fail_delivery;
            }
            PyObject *text = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), "replace");
            if (text == NULL)
                goto fail_delivery;
            set_field(delivery, F_KEY, text);
        }
        PyObject *id = record_id(run.prefix, offset);
        if (id == NULL)
            goto fail_delivery;
        set_field(delivery, F_ID, id);
        PyObject *handle = next_handle(handles);
        if (handle == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "the handle counter ended");
            goto fail_delivery;
        }
        set_field(delivery, F_HANDLE, handle);
        int failed = PyList_Append(out, delivery);
        Py_DECREF(delivery);
        if (failed)
            goto fail;
        continue;
    fail_delivery:
        Py_DECREF(delivery);
        goto fail;
    }
    if (flush(&run) < 0)
        goto fail;
    clear_run(&run);
    Py_RETURN_NONE;
fail:
    flush(&run);  /* the offsets of the deliveries made: keeps the exception */
    clear_run(&run);
    return NULL;
}

/* lease(ready, max_messages, taken, batch, ends, leased, busy, block) -> None
 *
 * LocalLeases._lease_ready's loop: take deliveries from the deque ``ready`` (popleft) into
 * the list ``taken`` until it holds ``max_messages``, one in flight per key: a delivery
 * whose key is in the set ``busy`` goes to block(key, delivery); the others get
 * ``lease_ends`` = ends and ``batch``, their key goes into ``busy`` and they go into
 * the dict ``leased`` under their handle. */
static PyObject *
lease(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "lease takes 8 arguments");
        return NULL;
    }
    PyObject *ready = args[0], *taken = args[2], *batch = args[3], *ends = args[4];
    PyObject *leased = args[5], *busy = args[6], *block = args[7];
    Py_ssize_t max_messages = PyLong_AsSsize_t(args[1]);
    if (max_messages == -1 && PyErr_Occurred())
        return NULL;
    if (delivery_type == NULL || !PyList_CheckExact(taken) || !PyDict_CheckExact(leased) || !PySet_Check(busy)) {
        PyErr_SetString(PyExc_TypeError, "lease(ready: deque, n, taken: list, batch, ends, leased: dict, busy: set, block) after bind()");
        return NULL;
    }
    PyObject *popleft = PyObject_GetAttrString(ready, "popleft");
    if (popleft == NULL)
        return NULL;
    while (PyList_GET_SIZE(taken) < max_messages) {
        Py_ssize_t left = PyObject_Length(ready);
        if (left < 0)
            goto fail;
        if (left == 0)
            break;
        PyObject *delivery = PyObject_CallNoArgs(popleft);
        if (delivery == NULL)
            goto fail;
        if (!PyObject_TypeCheck(delivery, delivery_type)) {
            PyErr_Format(PyExc_TypeError, "lease: a %s, not a delivery", Py_TYPE(delivery)->tp_name);
            Py_DECREF(delivery);
            goto fail;
        }
        PyObject *key = get_field(delivery, F_KEY);
        PyObject *handle = get_field(delivery, F_HANDLE);
        if (key == NULL || handle == NULL) {
            Py_DECREF(delivery);
            goto fail;
        }
        if (key != Py_None) {
            int is_busy = PySet_Contains(busy, key);
            if (is_busy == 0)
                is_busy = PySet_Add(busy, key) < 0 ? -1 : 0;
            if (is_busy != 0) {
                PyObject *done = is_busy < 0 ? NULL : PyObject_CallFunctionObjArgs(block, key, delivery, NULL);
                Py_DECREF(delivery);
                if (done == NULL)
                    goto fail;
                Py_DECREF(done);
                continue;
            }
        }
        set_field(delivery, F_LEASE_ENDS, Py_NewRef(ends));
        set_field(delivery, F_BATCH, Py_NewRef(batch));
        int failed = PyDict_SetItem(leased, handle, delivery) < 0 || PyList_Append(taken, delivery) < 0;
        Py_DECREF(delivery);
        if (failed)
            goto fail;
    }
    Py_DECREF(popleft);
    Py_RETURN_NONE;
fail:
    Py_DECREF(popleft);
    return NULL;
}

/* Settle the run's offsets with its partition's progress: progress[tp].settle_many(offsets). */
static int
settle_run(PyObject *progress, PyObject *tp, PyObject **offsets)
{
    if (tp == NULL || PyList_GET_SIZE(*offsets) == 0)
        return 0;
    PyObject *of = PyDict_GetItemWithError(progress, tp);
    if (of == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, tp);
        return -1;
    }
    static PyObject *name = NULL;
    if (name == NULL && (name = PyUnicode_InternFromString("settle_many")) == NULL)
        return -1;
    PyObject *done = PyObject_CallMethodOneArg(of, name, *offsets);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return -1;
    Py_SETREF(*offsets, fresh);
    return 0;
}

/* settle(handles, leased, progress, release, no_deliveries) -> [index of each handle not leased]
 *
 * Settlement.ack_many's loop: take each handle's delivery out of the dict ``leased``; its
 * batch (``left`` down by one, ``items`` = no_deliveries at 0) lets go of it; its offset is
 * settled (progress[tp].settle_many, once a partition run); release(key) lets its key's next
 * message go. */
static PyObject *
settle(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "settle takes 5 arguments");
        return NULL;
    }
    PyObject *handles = args[0], *leased = args[1], *progress = args[2], *release = args[3];
    PyObject *no_deliveries = args[4];
    if (delivery_type == NULL || !PyList_CheckExact(handles) || !PyDict_CheckExact(leased) || !PyDict_Check(progress)) {
        PyErr_SetString(PyExc_TypeError, "settle(handles: list, leased: dict, progress: dict, release, no_deliveries) after bind()");
        return NULL;
    }
    PyObject *missing = PyList_New(0);
    PyObject *offsets = PyList_New(0);
    PyObject *tp = NULL;  /* the run's partition (a new reference) */
    if (missing == NULL || offsets == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(handles); i++) {
        PyObject *handle = PyList_GET_ITEM(handles, i);
        PyObject *delivery = PyDict_GetItemWithError(leased, handle);
        if (delivery == NULL) {
            if (PyErr_Occurred())
                goto fail;
            PyObject *index = PyLong_FromSsize_t(i);
            int failed = index == NULL || PyList_Append(missing, index) < 0;
            Py_XDECREF(index);
            if (failed)
                goto fail;
            continue;
        }
        Py_INCREF(delivery);
        if (PyDict_DelItem(leased, handle) < 0) {
            Py_DECREF(delivery);
            goto fail;
        }
        PyObject *batch = get_field(delivery, F_BATCH);
        PyObject *dtp = get_field(delivery, F_TP);
        PyObject *offset = get_field(delivery, F_OFFSET);
        PyObject *key = get_field(delivery, F_KEY);
        if (batch == NULL || dtp == NULL || offset == NULL || key == NULL || !PyObject_TypeCheck(batch, batch_type)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "settle: a delivery's batch is not a _LeaseBatch");
            Py_DECREF(delivery);
            goto fail;
        }
        PyObject **left_slot = batch_slot(batch, B_LEFT);
        long left = *left_slot == NULL ? -1 : PyLong_AsLong(*left_slot);
        if (left == -1) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "settle: a batch without its count");
            Py_DECREF(delivery);
            goto fail;
        }
        PyObject *now_left = PyLong_FromLong(left - 1);
        if (now_left == NULL) {
            Py_DECREF(delivery);
            goto fail;
        }
        Py_SETREF(*left_slot, now_left);
        if (left - 1 == 0)
            Py_XSETREF(*batch_slot(batch, B_ITEMS), Py_NewRef(no_deliveries));
        if (dtp != tp) {
            if (settle_run(progress, tp, &offsets) < 0) {
                Py_DECREF(delivery);
                goto fail;
            }
            Py_XSETREF(tp, Py_NewRef(dtp));
        }
        if (PyList_Append(offsets, offset) < 0) {
            Py_DECREF(delivery);
            goto fail;
        }
        if (key != Py_None) {
            PyObject *done = PyObject_CallOneArg(release, key);
            Py_DECREF(delivery);
            if (done == NULL)
                goto fail;
            Py_DECREF(done);
        }
        else
            Py_DECREF(delivery);
    }
    if (settle_run(progress, tp, &offsets) < 0)
        goto fail;
    Py_XDECREF(tp);
    Py_DECREF(offsets);
    return missing;
fail:
    Py_XDECREF(tp);
    Py_XDECREF(offsets);
    Py_XDECREF(missing);
    return NULL;
}

/* retrack(deliveries) -> int
 *
 * Hand back to the cycle collector each delivery of the iterable ``deliveries`` that track()
 * left untracked (anything else is left as it is); returns how many. A driver that asks
 * track() to untrack calls this on every delivery it still refers to before its objects can
 * become unreachable (at close, and when its owner is gone), so that no cycle through an
 * untracked delivery outlives them. */
static PyObject *
retrack(PyObject *module, PyObject *deliveries)
{
    if (delivery_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() first");
        return NULL;
    }
    PyObject *it = PyObject_GetIter(deliveries);
    if (it == NULL)
        return NULL;
    Py_ssize_t count = 0;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        if (PyObject_TypeCheck(item, delivery_type) && !PyObject_GC_IsTracked(item)) {
            PyObject_GC_Track(item);
            count++;
        }
        Py_DECREF(item);
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(delivery_type, message_type): the slots to write and the Message methods to call."},
    {"track", (PyCFunction)(void (*)(void))track, METH_FASTCALL,
     "Append the deliveries of librdkafka messages to a list (see _speedups.c)."},
    {"lease", (PyCFunction)(void (*)(void))lease, METH_FASTCALL,
     "LocalLeases._lease_ready's loop (see _speedups.c)."},
    {"settle", (PyCFunction)(void (*)(void))settle, METH_FASTCALL,
     "Settlement.ack_many's loop (see _speedups.c)."},
    {"retrack", (PyCFunction)retrack, METH_O,
     "Hand the deliveries track() left untracked back to the cycle collector (see _speedups.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "portable_kafka._speedups",
    "The confluent engine's per-message tracking in C (see _speedups.c).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    empty_bytes = PyBytes_FromStringAndSize("", 0);
    empty_tuple = PyTuple_New(0);
    one = PyLong_FromLong(1);
    zero_float = PyFloat_FromDouble(0.0);
    str_add_fetched = PyUnicode_InternFromString("add_fetched");
    if (!empty_bytes || !empty_tuple || !one || !zero_float || !str_add_fetched)
        return NULL;
    return PyModule_Create(&module);
}
