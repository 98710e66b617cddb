/* The compiled loop over v0/v1 message sets (magic 0 and 1, Kafka 0.8-0.10): metaq/protocol/legacy.py calls it
 * for every run of uncompressed entries and for every compressed wrapper's inner set, so a message costs no
 * Python-level step. The layout, the checks and the records it gives are those of legacy.walk_message_set, the
 * pure-Python reference that names the fault whenever this loop stops at one (docs/legacy-wire.md).
 *
 * Plain CPython C API (no dependency beyond a C compiler and Python.h); the CRC-32 (IEEE, as zlib's crc32 that
 * Python's zlib.crc32 calls) is computed here with slicing-by-8 tables, so zlib's headers are not needed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* What walk() stopped at (legacy.py has the same constants). */
#define STOP_END 0     /* the end, an entry cut off by the end, or an entry of another magic */
#define STOP_WRAPPER 1 /* a complete compressed entry: Python decompresses it */
#define STOP_BAD 2     /* a malformed entry: Python's reference walk names the fault */

#define LOG_OVERHEAD 12 /* offset int64, message_size int32 */
#define MAGIC_POS 16
#define HEADER_BYTES 18 /* up to and including the attributes byte */
#define CODEC_MASK 0x07

static const Py_ssize_t min_message_size[2] = {14, 22}; /* crc, magic, attributes, [timestamp], two -1 lengths */
static const Py_ssize_t key_pos[2] = {18, 26};
static uint32_t crc_table[8][256];
static PyObject *no_headers; /* () */

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
}

static uint32_t crc32_ieee(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^ crc_table[5][(a >> 16) & 0xFF] ^
            crc_table[4][a >> 24] ^ crc_table[3][b & 0xFF] ^ crc_table[2][(b >> 8) & 0xFF] ^
            crc_table[1][(b >> 16) & 0xFF] ^ crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static inline uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | (uint64_t)be32(p + 4));
}

/* A key or value at buf[*k] within the message ending at stop: its length (-1: null) or -2 if it does not fit. */
static inline int64_t field_length(const unsigned char *buf, Py_ssize_t *k, Py_ssize_t stop) {
    if (stop - *k < 4) return -2;
    int64_t n = (int32_t)be32(buf + *k);
    *k += 4;
    if (n < -1 || n > stop - *k) return -2;
    return n;
}

static inline PyObject *field_object(const unsigned char *buf, Py_ssize_t at, int64_t n) {
    if (n < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)buf + at, (Py_ssize_t)n);
}

/* offset + delta as a Python int (an unbounded sum, as Python adds), and whether it is at least min_offset. */
static PyObject *shifted_offset(int64_t offset, int64_t delta, int64_t min_offset, int *keep) {
    if ((delta > 0 && offset > INT64_MAX - delta) || (delta < 0 && offset < INT64_MIN - delta)) {
        *keep = delta > 0; /* past the int64 range: above or below every min_offset */
        if (!*keep) return NULL;
        PyObject *a = PyLong_FromLongLong(offset), *b = PyLong_FromLongLong(delta), *sum = NULL;
        if (a && b) sum = PyNumber_Add(a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
        return sum;
    }
    *keep = offset + delta >= min_offset;
    return *keep ? PyLong_FromLongLong(offset + delta) : NULL;
}

PyDoc_STRVAR(walk_doc,
"walk(data, pos, end, min_offset, check_crcs, out, offset_delta, timestamp, producer_magic)\n"
"    -> (pos, last_offset, stop)\n\n"
"Append (offset + offset_delta, timestamp or the message's, key, value, ()) for each complete uncompressed\n"
"v0/v1 entry of data[pos:end] whose shifted offset is at least min_offset (every entry is checked, CRC-32\n"
"included if check_crcs). Stops at the end or an entry cut off by it, an entry of another magic (STOP_END),\n"
"a compressed entry (STOP_WRAPPER) or a malformed one (STOP_BAD); returns the position of that entry (or the\n"
"end) and the offset as written of the last entry read (None: none). With producer_magic 0 or 1 (a produced\n"
"set), an entry of another magic or with attribute bits besides the codec is malformed too.");

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    long long min_offset, delta;
    int check_crcs, producer_magic;
    PyObject *out, *timestamp_override;
    if (!PyArg_ParseTuple(args, "y*nnLpO!LOi:walk", &view, &pos, &end, &min_offset, &check_crcs, &PyList_Type, &out,
                          &delta, &timestamp_override, &producer_magic))
        return NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk: pos and end must lie within the data, pos <= end");
        return NULL;
    }
    const unsigned char *buf = view.buf;
    int stop_reason = STOP_END;
    int have_last = 0;
    int64_t last_offset = 0;
    while (end - pos >= HEADER_BYTES) {
        const unsigned char *p = buf + pos;
        int64_t offset = be64(p);
        int64_t size = (int32_t)be32(p + 8);
        unsigned char magic = p[MAGIC_POS], attributes = p[MAGIC_POS + 1];
        if (magic > 1) break;
        if (producer_magic >= 0 && (magic != producer_magic || (attributes & ~CODEC_MASK))) {
            stop_reason = STOP_BAD;
            break;
        }
        if (size < min_message_size[magic]) {
            stop_reason = STOP_BAD;
            break;
        }
        if (size > end - pos - LOG_OVERHEAD) break; /* cut off by the fetch size */
        Py_ssize_t stop = pos + LOG_OVERHEAD + (Py_ssize_t)size;
        if (attributes & CODEC_MASK) {
            stop_reason = STOP_WRAPPER;
            break;
        }
        if (check_crcs && crc32_ieee(p + MAGIC_POS, (Py_ssize_t)size - 4) != be32(p + LOG_OVERHEAD)) {
            stop_reason = STOP_BAD;
            break;
        }
        Py_ssize_t k = pos + key_pos[magic];
        Py_ssize_t key_at, value_at;
        int64_t key_n = field_length(buf, &k, stop);
        key_at = k;
        if (key_n > 0) k += (Py_ssize_t)key_n;
        int64_t value_n = key_n < -1 ? -2 : field_length(buf, &k, stop);
        value_at = k;
        if (value_n > 0) k += (Py_ssize_t)value_n;
        if (value_n < -1 || k != stop) {
            stop_reason = STOP_BAD;
            break;
        }
        int keep;
        PyObject *offset_obj = shifted_offset(offset, delta, min_offset, &keep);
        if (keep) {
            if (!offset_obj) goto fail;
            PyObject *record = PyTuple_New(5);
            if (!record) {
                Py_DECREF(offset_obj);
                goto fail;
            }
            PyTuple_SET_ITEM(record, 0, offset_obj);
            PyObject *ts;
            if (timestamp_override != Py_None) {
                Py_INCREF(timestamp_override);
                ts = timestamp_override;
            } else {
                ts = PyLong_FromLongLong(magic ? be64(p + LOG_OVERHEAD + 6) : -1);
            }
            PyTuple_SET_ITEM(record, 1, ts);
            PyTuple_SET_ITEM(record, 2, field_object(buf, key_at, key_n));
            PyTuple_SET_ITEM(record, 3, field_object(buf, value_at, value_n));
            Py_INCREF(no_headers);
            PyTuple_SET_ITEM(record, 4, no_headers);
            if (!ts || !PyTuple_GET_ITEM(record, 2) || !PyTuple_GET_ITEM(record, 3) || PyList_Append(out, record) < 0) {
                Py_DECREF(record); /* NULL items are skipped by the tuple's deallocator */
                goto fail;
            }
            /* ints, bytes, None and () cannot form a cycle: untracked, a million records cost the garbage
             * collector's young-generation passes nothing (CPython untracks such tuples itself, later) */
            PyObject_GC_UnTrack(record);
            Py_DECREF(record);
        } else if (PyErr_Occurred()) {
            goto fail;
        }
        have_last = 1;
        last_offset = offset;
        pos = stop;
    }
    PyBuffer_Release(&view);
    if (have_last) return Py_BuildValue("nLi", pos, (long long)last_offset, stop_reason);
    return Py_BuildValue("nOi", pos, Py_None, stop_reason);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

PyDoc_STRVAR(last_offset_doc,
"last_offset(data, magic) -> int | None\n\n"
"The offset as written of the last entry of a compressed wrapper's inner set if its entries' headers are sound:\n"
"at least one, each complete, uncompressed, of magic 0 or 1 (of magic, unless it is -1), at least the smallest\n"
"size. None otherwise: legacy.py's reference walk then names the fault. Keys, values and CRCs are walk()'s.");

static PyObject *last_offset(PyObject *self, PyObject *args) {
    Py_buffer view;
    int want_magic;
    if (!PyArg_ParseTuple(args, "y*i:last_offset", &view, &want_magic)) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t pos = 0, end = view.len;
    int64_t last = 0;
    int sound = end > 0;
    while (sound && pos < end) {
        const unsigned char *p = buf + pos;
        if (end - pos < HEADER_BYTES) {
            sound = 0;
            break;
        }
        unsigned char magic = p[MAGIC_POS];
        if (magic > 1 || (want_magic >= 0 && magic != want_magic) || (p[MAGIC_POS + 1] & CODEC_MASK)) {
            sound = 0;
            break;
        }
        int64_t size = (int32_t)be32(p + 8);
        if (size < min_message_size[magic] || size > end - pos - LOG_OVERHEAD) {
            sound = 0;
            break;
        }
        last = be64(p);
        pos += LOG_OVERHEAD + (Py_ssize_t)size;
    }
    PyBuffer_Release(&view);
    if (!sound) Py_RETURN_NONE;
    return PyLong_FromLongLong(last);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, walk_doc},
    {"last_offset", last_offset, METH_VARARGS, last_offset_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "metaq.protocol._legacy_decode",
    "The compiled loop over v0/v1 message sets (see metaq/protocol/legacy.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__legacy_decode(void) {
    crc_init();
    no_headers = PyTuple_New(0);
    if (!no_headers) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "STOP_END", STOP_END) < 0 || PyModule_AddIntConstant(m, "STOP_WRAPPER", STOP_WRAPPER) < 0 ||
        PyModule_AddIntConstant(m, "STOP_BAD", STOP_BAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
