/* endpoint._burst: the endpoint's per-packet work in C, beside its Python twins.
 *
 * Burst I/O (endpoint/udp_io.py is the twin of each):
 *   recv_burst(fd, out, limit, bufsize=65535, with_addr=False) -> (appended, truncated)
 *       one recvmmsg(2): up to `limit` datagrams appended to the list `out` as (bytes, tos)
 *       or (bytes, tos, (ip, port)); the IP ToS from the IP_RECVTOS cmsg (0 without one). A
 *       datagram longer than `bufsize` (MSG_TRUNC) is dropped and counted, never appended.
 *   send_burst(items) -> (done, sent, errors)
 *       items: a list of (fd, dst, port, tos, payload); dst an IPv4 address string or None
 *       (a connected socket), tos 0..255 sent as an IP_TOS cmsg or -1 for none (raw sockets),
 *       payload any contiguous buffer. Runs of one fd go out by sendmmsg(2). Stops at the first
 *       send that would block (EAGAIN, EWOULDBLOCK, ENOBUFS): `done` is the index of the first
 *       item not handled, so the caller queues items[done:]. A refused send on a connected
 *       socket (ECONNREFUSED: an ICMP error from an earlier datagram) counts as an error and as
 *       handled, as does any other error (dropped, counted): the twin's rules exactly.
 * Codec (endpoint/codec.py is the twin):
 *   data_crc(buf) -> int     crc32 of a data packet with its pkt_crc field (bytes 48..51) as
 *                            zero; any length (a short one hashes what it has, as the twin).
 *   seal_data(header, payload) -> bytes
 *                            header (52 B, pkt_crc zero) + payload in one allocation, with
 *                            pkt_crc set: the data packet's one copy and one crc pass.
 *
 * Every length is checked; nothing a peer sends can make these read or write out of bounds
 * (tests/test_endpoint_burst_fuzz.py runs them under AddressSanitizer and UBSan).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <zlib.h>

#define PKT_CRC_AT 48 /* BTH (12) + 36: MRCData.pkt_crc (endpoint.wire.PKT_CRC_AT) */
#define DATA_HEADER_LEN 52
#define BURST_MAX 1024 /* UIO_MAXIOV: sendmmsg's and recvmmsg's own limit */
#define TOS_CMSG_SPACE CMSG_SPACE(sizeof(int))

/* ----- crc ------------------------------------------------------------------------------ */

static uint32_t
crc_update(uint32_t crc, const unsigned char *p, Py_ssize_t n)
{
    /* zlib's crc32 takes a uInt length: feed it in pieces below 1 GiB. */
    while (n > 0) {
        uInt k = n > (1 << 30) ? (uInt)(1 << 30) : (uInt)n;
        crc = (uint32_t)crc32((uLong)crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

static uint32_t
data_crc_raw(const unsigned char *p, Py_ssize_t n)
{
    static const unsigned char zero4[4] = {0, 0, 0, 0};
    Py_ssize_t head = n < PKT_CRC_AT ? n : PKT_CRC_AT;
    uint32_t crc = crc_update(0, p, head);
    crc = crc_update(crc, zero4, 4);
    if (n > PKT_CRC_AT + 4)
        crc = crc_update(crc, p + PKT_CRC_AT + 4, n - PKT_CRC_AT - 4);
    return crc;
}

static PyObject *
burst_data_crc(PyObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = data_crc_raw((const unsigned char *)b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *
burst_seal_data(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "seal_data(header, payload): two arguments");
        return NULL;
    }
    Py_buffer h, p;
    if (PyObject_GetBuffer(args[0], &h, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &p, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&h);
        return NULL;
    }
    PyObject *out = NULL;
    if (h.len != DATA_HEADER_LEN) {
        PyErr_Format(PyExc_ValueError, "seal_data: header of %zd bytes, expected %d", h.len,
                     DATA_HEADER_LEN);
        goto done;
    }
    if (p.len > PY_SSIZE_T_MAX - DATA_HEADER_LEN) {
        PyErr_SetString(PyExc_OverflowError, "seal_data: payload too long");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, DATA_HEADER_LEN + p.len);
    if (out == NULL)
        goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(o, h.buf, DATA_HEADER_LEN);
    memset(o + PKT_CRC_AT, 0, 4);
    if (p.len)
        memcpy(o + DATA_HEADER_LEN, p.buf, (size_t)p.len);
    uint32_t crc = crc_update(0, o, DATA_HEADER_LEN + p.len);
    o[PKT_CRC_AT] = (unsigned char)(crc >> 24);
    o[PKT_CRC_AT + 1] = (unsigned char)(crc >> 16);
    o[PKT_CRC_AT + 2] = (unsigned char)(crc >> 8);
    o[PKT_CRC_AT + 3] = (unsigned char)crc;
done:
    PyBuffer_Release(&h);
    PyBuffer_Release(&p);
    return out;
}

/* ----- receive -------------------------------------------------------------------------- */

/* One arena for every recv_burst call: the module runs under the GIL, one call at a time
 * (the GIL is not released while the arena is in use). */
static unsigned char *rx_arena = NULL;
static size_t rx_arena_size = 0;
static struct mmsghdr rx_msgs[BURST_MAX];
static struct iovec rx_iov[BURST_MAX];
static struct sockaddr_in rx_addr[BURST_MAX];
static union {
    char buf[TOS_CMSG_SPACE * 2];
    struct cmsghdr align;
} rx_ctl[BURST_MAX];

static PyObject *
burst_recv_burst(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fd", "out", "limit", "bufsize", "with_addr", NULL};
    int fd;
    PyObject *out;
    Py_ssize_t limit = 64, bufsize = 65535;
    int with_addr = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO!|nnp", kwlist, &fd, &PyList_Type, &out,
                                     &limit, &bufsize, &with_addr))
        return NULL;
    if (limit < 0 || limit > BURST_MAX) {
        PyErr_Format(PyExc_ValueError, "limit: 0..%d, got %zd", BURST_MAX, limit);
        return NULL;
    }
    if (bufsize < 1 || bufsize > 65535) {
        PyErr_Format(PyExc_ValueError, "bufsize: 1..65535, got %zd", bufsize);
        return NULL;
    }
    size_t need = (size_t)limit * (size_t)bufsize;
    if (need > rx_arena_size) {
        unsigned char *a = PyMem_RawRealloc(rx_arena, need);
        if (a == NULL)
            return PyErr_NoMemory();
        rx_arena = a;
        rx_arena_size = need;
    }
    Py_ssize_t appended = 0, truncated = 0;
    int refused = 0;
    while (appended + truncated < limit) {
        unsigned int want = (unsigned int)(limit - appended - truncated);
        for (unsigned int i = 0; i < want; i++) {
            rx_iov[i].iov_base = rx_arena + (size_t)i * (size_t)bufsize;
            rx_iov[i].iov_len = (size_t)bufsize;
            struct msghdr *m = &rx_msgs[i].msg_hdr;
            m->msg_name = &rx_addr[i];
            m->msg_namelen = sizeof(rx_addr[i]);
            m->msg_iov = &rx_iov[i];
            m->msg_iovlen = 1;
            m->msg_control = rx_ctl[i].buf;
            m->msg_controllen = sizeof(rx_ctl[i].buf);
            m->msg_flags = 0;
            rx_msgs[i].msg_len = 0;
        }
        int n = recvmmsg(fd, rx_msgs, want, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                break;
            if (errno == ECONNREFUSED && refused++ < limit)
                continue; /* an ICMP error queued on the socket: not a datagram */
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        for (int i = 0; i < n; i++) {
            struct msghdr *m = &rx_msgs[i].msg_hdr;
            size_t len = rx_msgs[i].msg_len;
            if ((m->msg_flags & MSG_TRUNC) || len > (size_t)bufsize) {
                truncated++;
                continue;
            }
            int tos = 0;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c)) {
                if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS &&
                    c->cmsg_len >= CMSG_LEN(1))
                    tos = *(unsigned char *)CMSG_DATA(c);
            }
            PyObject *data = PyBytes_FromStringAndSize((const char *)rx_iov[i].iov_base,
                                                       (Py_ssize_t)len);
            if (data == NULL)
                return NULL;
            PyObject *item;
            if (with_addr) {
                char ip[INET_ADDRSTRLEN] = "";
                int port = 0;
                if (m->msg_namelen >= sizeof(struct sockaddr_in) &&
                    rx_addr[i].sin_family == AF_INET) {
                    inet_ntop(AF_INET, &rx_addr[i].sin_addr, ip, sizeof(ip));
                    port = ntohs(rx_addr[i].sin_port);
                }
                item = Py_BuildValue("(Ni(si))", data, tos, ip, port);
            }
            else {
                item = Py_BuildValue("(Ni)", data, tos);
            }
            if (item == NULL)
                return NULL;
            int rc = PyList_Append(out, item);
            Py_DECREF(item);
            if (rc < 0)
                return NULL;
            appended++;
        }
        if ((unsigned int)n < want)
            break; /* the socket is empty: no second syscall to learn it */
    }
    return Py_BuildValue("(nn)", appended, truncated);
}

/* ----- send ----------------------------------------------------------------------------- */

static struct mmsghdr tx_msgs[BURST_MAX];
static struct iovec tx_iov[BURST_MAX];
static struct sockaddr_in tx_addr[BURST_MAX];
static Py_buffer tx_buf[BURST_MAX];
static Py_ssize_t tx_held; /* tx_buf[0..tx_held) hold buffers the caller must release */
static union {
    char buf[TOS_CMSG_SPACE];
    struct cmsghdr align;
} tx_ctl[BURST_MAX];

static int
would_block(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS;
}

/* Parse items[start:start+k) (all of one fd) into tx_* slots. Returns how many parsed (the
 * run ends early at another fd), or -1 with an exception set. tx_held counts the buffers
 * acquired, which the caller releases either way. */
static Py_ssize_t
fill_run(PyObject *items, Py_ssize_t start, Py_ssize_t end, int *fd_out)
{
    Py_ssize_t k = 0;
    int fd = -1;
    for (Py_ssize_t j = start; j < end && k < BURST_MAX; j++, k++) {
        PyObject *it = PyList_GET_ITEM(items, j);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 5) {
            PyErr_Format(PyExc_TypeError,
                         "send_burst: items[%zd]: expected (fd, dst, port, tos, payload)", j);
            return -1;
        }
        long lfd = PyLong_AsLong(PyTuple_GET_ITEM(it, 0));
        if (lfd == -1 && PyErr_Occurred())
            return -1;
        if (lfd < 0 || lfd > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "send_burst: items[%zd]: bad fd %ld", j, lfd);
            return -1;
        }
        int ifd = (int)lfd;
        if (k == 0)
            fd = ifd;
        else if (ifd != fd)
            break;
        PyObject *dst = PyTuple_GET_ITEM(it, 1);
        long port = PyLong_AsLong(PyTuple_GET_ITEM(it, 2));
        if (port == -1 && PyErr_Occurred())
            return -1;
        long tos = PyLong_AsLong(PyTuple_GET_ITEM(it, 3));
        if (tos == -1 && PyErr_Occurred())
            return -1;
        if (port < 0 || port > 65535 || tos < -1 || tos > 255) {
            PyErr_Format(PyExc_ValueError, "send_burst: items[%zd]: port %ld or tos %ld out of range",
                         j, port, tos);
            return -1;
        }
        struct msghdr *m = &tx_msgs[k].msg_hdr;
        memset(m, 0, sizeof(*m));
        if (dst != Py_None) {
            const char *s = PyUnicode_AsUTF8(dst);
            if (s == NULL)
                return -1;
            memset(&tx_addr[k], 0, sizeof(tx_addr[k]));
            tx_addr[k].sin_family = AF_INET;
            tx_addr[k].sin_port = htons((uint16_t)port);
            if (inet_pton(AF_INET, s, &tx_addr[k].sin_addr) != 1) {
                PyErr_Format(PyExc_ValueError, "send_burst: items[%zd]: bad IPv4 address %R", j,
                             dst);
                return -1;
            }
            m->msg_name = &tx_addr[k];
            m->msg_namelen = sizeof(tx_addr[k]);
        }
        if (tos >= 0) {
            memset(tx_ctl[k].buf, 0, sizeof(tx_ctl[k].buf));
            m->msg_control = tx_ctl[k].buf;
            m->msg_controllen = TOS_CMSG_SPACE;
            struct cmsghdr *c = CMSG_FIRSTHDR(m);
            c->cmsg_level = IPPROTO_IP;
            c->cmsg_type = IP_TOS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            int v = (int)tos;
            memcpy(CMSG_DATA(c), &v, sizeof(v));
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(it, 4), &tx_buf[k], PyBUF_SIMPLE) < 0)
            return -1;
        tx_held = k + 1;
        tx_iov[k].iov_base = tx_buf[k].buf;
        tx_iov[k].iov_len = (size_t)tx_buf[k].len;
        m->msg_iov = &tx_iov[k];
        m->msg_iovlen = 1;
        tx_msgs[k].msg_len = 0;
    }
    *fd_out = fd;
    return k;
}

static PyObject *
burst_send_burst(PyObject *self, PyObject *items)
{
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "send_burst(items): a list");
        return NULL;
    }
    Py_ssize_t total = PyList_GET_SIZE(items);
    Py_ssize_t done = 0, sent = 0, errors = 0;
    while (done < total) {
        int fd = -1;
        tx_held = 0;
        Py_ssize_t k = fill_run(items, done, total, &fd);
        if (k < 0) {
            for (Py_ssize_t j = 0; j < tx_held; j++)
                PyBuffer_Release(&tx_buf[j]);
            tx_held = 0;
            return NULL;
        }
        Py_ssize_t off = 0;
        int stop = 0;
        while (off < k) {
            int n = sendmmsg(fd, &tx_msgs[off], (unsigned int)(k - off), MSG_DONTWAIT);
            if (n > 0) {
                off += n;
                sent += n;
                continue;
            }
            int e = errno;
            if (n < 0 && e == EINTR)
                continue;
            if (n < 0 && would_block(e)) {
                stop = 1;
                break;
            }
            /* refused (connected socket) or another error: counted, the item handled */
            errors++;
            off++;
        }
        for (Py_ssize_t j = 0; j < tx_held; j++)
            PyBuffer_Release(&tx_buf[j]);
        tx_held = 0;
        done += off;
        if (stop)
            break;
    }
    return Py_BuildValue("(nnn)", done, sent, errors);
}

static PyMethodDef methods[] = {
    {"recv_burst", (PyCFunction)(void (*)(void))burst_recv_burst, METH_VARARGS | METH_KEYWORDS,
     "recv_burst(fd, out, limit=64, bufsize=65535, with_addr=False) -> (appended, truncated)"},
    {"send_burst", burst_send_burst, METH_O,
     "send_burst(items: list of (fd, dst, port, tos, payload)) -> (done, sent, errors)"},
    {"data_crc", burst_data_crc, METH_O,
     "data_crc(buf) -> crc32 of a data packet with its pkt_crc field taken as zero"},
    {"seal_data", (PyCFunction)(void (*)(void))burst_seal_data, METH_FASTCALL,
     "seal_data(header, payload) -> header + payload with pkt_crc set"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "endpoint._burst",
    "The endpoint's burst I/O (recvmmsg/sendmmsg) and data-packet crc: endpoint/_burst.c.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__burst(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "BURST_MAX", BURST_MAX) < 0 ||
        PyModule_AddIntConstant(m, "DATA_HEADER_LEN", DATA_HEADER_LEN) < 0 ||
        PyModule_AddIntConstant(m, "PKT_CRC_AT", PKT_CRC_AT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
