/* switch._core: the switch's forwarding core in C, the twin of the Python data path.
 *
 * One Core object holds every switch of a process (a shared switch process serves a whole
 * fabric), their ports, FIBs, egress queues, the heap of departures and the in-memory wires
 * between them. switch/core.py wraps it behind the sans-IO interface it shares with the Python
 * reference (switch/dataplane.py, port.py, queueing.py, egress_timers.py, local_links.py);
 * every decision here mirrors a line there, with the same floating-point operations in the
 * same order, so that both give bit-identical output (tests/test_switch_core_diff.py).
 *
 * What the C core does not handle -- anything the Python inline path hands to
 * `Switch._receive_slow`: non-IPv4, IP options, bad checksum or length, TTL <= 1, no route,
 * a local route, no live next hop, a switch down or a port whose receive is impaired -- it
 * hands back at once, in order, to a Python callable `slow(switch, port, bytearray, now)`,
 * which runs the reference slow path (ICMP errors, drops by reason); frames that path routes
 * come back in through `offer`. A frame is never read past its length: the checks below are
 * the inline path's, in its order.
 *
 * Frames live in preallocated slots (a free list of MTU+14 byte buffers; a longer frame gets
 * its own allocation). I/O is kept out: `receive` takes bytes-like objects and frames for
 * ports not wired in memory collect in an egress list (`take_egress`). A later ring I/O adds
 * `receive_ring` (calls rx_batch on TPACKET_V2 slots) and replaces `transmit`'s egress append
 * with a write into the port's tx ring; nothing else changes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* No fused multiply-add (setup.py: -ffp-contract=off, which ISO C mode implies in gcc): every
 * time computation rounds as CPython's does. */

#define BUCKETS 256
#define QMAX_RING 512
#define ROCE_PORT 4791
#define CHUNK 256
#define CACHE 4096

/* ----- frames ------------------------------------------------------------------------------ */

typedef struct Frame {
    struct Frame *next;
    uint32_t len, cap;
    uint8_t data[];
} Frame;

typedef struct {
    Frame **buf;
    uint32_t head, count, cap; /* cap: a power of two */
} FQ;

typedef struct {
    double t;
    Frame *f;
} Flight;

typedef struct {
    Flight *buf;
    uint32_t head, count, cap;
} FlQ;

/* ----- ports, routes, switches -------------------------------------------------------------- */

typedef struct {
    int sw, index, gid; /* gid: the port's place in the process = its `seq` */
    double spb, delay, early, catch_up, slack;
    int64_t data_limit, prio_limit, ecn_threshold;
    int up, blackhole, rx_clean;
    int peer; /* gid of the peer port wired in memory, or -1 */
    double busy_until;
    FQ data, prio;
    int64_t data_bytes, prio_bytes, max_data, max_prio;
    FlQ inflight;
    uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes;
    uint64_t drop_link_down, drop_blackhole, drop_queue_full, drop_prio_full, drop_switch_down;
    uint64_t trims, ecn_marks;
    /* QueueMaxima */
    double qm_interval, qm_start, qm_until;
    int64_t qm_peak;
    double qm_ring_t[QMAX_RING];
    int64_t qm_ring_b[QMAX_RING];
    uint32_t qm_head, qm_count;
    uint64_t qm_lost;
    /* ActivePorts */
    int in_active;
    int64_t sched;
    uint64_t mark;
} Port;

typedef struct {
    uint32_t net, mask;
    int plen;
    int n;            /* members */
    int *mport;       /* member -> port index on its switch */
    uint8_t *ml2;     /* member -> 12 bytes of L2 header */
    int *live;        /* live member indices, in member order */
    int nlive;
    uint16_t table[BUCKETS];
} Route;

typedef struct {
    uint32_t seed;
    int mixed, source_routed, plane_bits;
    int trim_bytes, trimming, trimmable, trimmed, control;
    int fast;
    int nports, first_gid;
    Route *routes; /* sorted by prefix length, longest first */
    int nroutes;
    uint32_t cache_key[CACHE];
    int32_t cache_val[CACHE]; /* route index + 1; -1: no route; 0: empty */
} Sw;

typedef struct {
    double t;
    int64_t seq;
    uint64_t n;
    int gid;
} HeapEntry;

typedef struct {
    int sw, port;
    Frame *f;
} Egress;

typedef struct {
    PyObject_HEAD
    Sw **sws;
    int nsw;
    Port **ports;
    int nports;
    HeapEntry *heap;
    int heap_n, heap_cap;
    Port **active;
    int active_n, active_cap;
    Port **due;
    Egress *egress;
    int egress_n, egress_cap;
    Frame *free_list;
    void **chunks;
    int nchunks, chunks_cap;
    uint32_t slot;
    uint64_t delivered, counter, epoch, exceptions;
    double now;
    PyObject *slow;
    int error;
} Core;

/* ----- allocation -------------------------------------------------------------------------- */

static int grow(void **buf, int *cap, size_t elem, int need) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *b = realloc(*buf, elem * (size_t)c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
    return 0;
}

static Frame *frame_new(Core *c, uint32_t n) {
    Frame *f;
    if (n > c->slot) {
        f = malloc(sizeof(Frame) + n);
        if (!f) return NULL;
        f->cap = n;
        f->len = n;
        return f;
    }
    if (!c->free_list) {
        size_t size = (sizeof(Frame) + c->slot + 7) & ~(size_t)7;
        char *chunk = malloc(size * CHUNK);
        if (!chunk) return NULL;
        if (grow((void **)&c->chunks, &c->chunks_cap, sizeof(void *), c->nchunks + 1)) {
            free(chunk);
            return NULL;
        }
        c->chunks[c->nchunks++] = chunk;
        for (int i = 0; i < CHUNK; i++) {
            Frame *s = (Frame *)(chunk + size * i);
            s->cap = c->slot;
            s->next = c->free_list;
            c->free_list = s;
        }
    }
    f = c->free_list;
    c->free_list = f->next;
    f->len = n;
    return f;
}

static void frame_free(Core *c, Frame *f) {
    if (f->cap != c->slot) {
        free(f);
        return;
    }
    f->next = c->free_list;
    c->free_list = f;
}

static int fq_push(FQ *q, Frame *f) {
    if (q->count == q->cap) {
        uint32_t nc = q->cap ? q->cap * 2 : 16;
        Frame **b = malloc(sizeof(Frame *) * nc);
        if (!b) return -1;
        for (uint32_t i = 0; i < q->count; i++) b[i] = q->buf[(q->head + i) & (q->cap - 1)];
        free(q->buf);
        q->buf = b;
        q->head = 0;
        q->cap = nc;
    }
    q->buf[(q->head + q->count) & (q->cap - 1)] = f;
    q->count++;
    return 0;
}

static Frame *fq_pop(FQ *q) {
    Frame *f = q->buf[q->head];
    q->head = (q->head + 1) & (q->cap - 1);
    q->count--;
    return f;
}

static int flq_push(FlQ *q, double t, Frame *f) {
    if (q->count == q->cap) {
        uint32_t nc = q->cap ? q->cap * 2 : 16;
        Flight *b = malloc(sizeof(Flight) * nc);
        if (!b) return -1;
        for (uint32_t i = 0; i < q->count; i++) b[i] = q->buf[(q->head + i) & (q->cap - 1)];
        free(q->buf);
        q->buf = b;
        q->head = 0;
        q->cap = nc;
    }
    q->buf[(q->head + q->count) & (q->cap - 1)].t = t;
    q->buf[(q->head + q->count) & (q->cap - 1)].f = f;
    q->count++;
    return 0;
}

static Frame *flq_pop(FlQ *q) {
    Frame *f = q->buf[q->head].f;
    q->head = (q->head + 1) & (q->cap - 1);
    q->count--;
    return f;
}

/* ----- byte operations (switch/frames.py) --------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

/* zlib.crc32(data, value) */
static uint32_t crc32z(const uint8_t *p, size_t n, uint32_t value) {
    uint32_t c = ~value;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return ~c;
}

static uint32_t mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    return h ^ (h >> 16);
}

/* RFC 1624 eqn. 3 (frames._update_checksum) */
static void update_checksum(uint8_t *d, uint32_t old_word, uint32_t new_word) {
    uint32_t hc = ((uint32_t)d[24] << 8) | d[25];
    uint32_t s = (~hc & 0xFFFF) + (~old_word & 0xFFFF) + new_word;
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    hc = ~s & 0xFFFF;
    d[24] = hc >> 8;
    d[25] = hc & 0xFF;
}

static int mark_ce(uint8_t *d) {
    uint32_t tos = d[15], ecn = tos & 3;
    if (ecn == 0 || ecn == 3) return 0;
    d[15] = tos | 3;
    update_checksum(d, 0x4500 | tos, 0x4500 | tos | 3);
    return 1;
}

static uint32_t header_sum(const uint8_t *d) { /* frames.ip_header_sum: 20 bytes from 14 */
    uint32_t s = 0;
    for (int i = 14; i < 34; i += 2) s += ((uint32_t)d[i] << 8) | d[i + 1];
    s = (s & 0xFFFF) + (s >> 16);
    return (s & 0xFFFF) + (s >> 16);
}

/* frames.trim, in place (the caller checked len >= 34 and trim_bytes >= 34) */
static void trim(Frame *f, int trim_bytes, int trimmed_dscp) {
    uint8_t *d = f->data;
    uint32_t totlen = ((uint32_t)d[16] << 8) | d[17];
    uint32_t n = f->len;
    if ((uint32_t)trim_bytes < n) n = (uint32_t)trim_bytes;
    if (14 + totlen < n) n = 14 + totlen;
    f->len = n;
    totlen = n - 14;
    d[16] = totlen >> 8;
    d[17] = totlen & 0xFF;
    d[15] = (uint8_t)((trimmed_dscp << 2) | (d[15] & 3));
    if (n >= 42) {
        d[38] = (totlen - 20) >> 8;
        d[39] = (totlen - 20) & 0xFF;
        d[40] = d[41] = 0;
    }
    d[24] = d[25] = 0;
    uint32_t cs = ~header_sum(d) & 0xFFFF;
    d[24] = cs >> 8;
    d[25] = cs & 0xFF;
}

/* ----- the FIB (switch/fib.py) -------------------------------------------------------------- */

static void route_rebuild(Route *r) {
    /* Route.rebuild: bucket b is member b % n's; a dead member's go round-robin to the live */
    if (!r->n) return;
    int k = 0;
    for (int b = 0; b < BUCKETS; b++) {
        int owner = b % r->n, alive = 0;
        for (int i = 0; i < r->nlive; i++)
            if (r->live[i] == owner) alive = 1;
        if (alive || !r->nlive) {
            r->table[b] = (uint16_t)owner;
        } else {
            r->table[b] = (uint16_t)r->live[k % r->nlive];
            k++;
        }
    }
}

static Route *fib_lookup(Sw *s, uint32_t dst) {
    uint32_t slot = (dst * 2654435761u) >> 20 & (CACHE - 1);
    if (s->cache_val[slot] && s->cache_key[slot] == dst)
        return s->cache_val[slot] > 0 ? &s->routes[s->cache_val[slot] - 1] : NULL;
    int found = -1;
    for (int i = 0; i < s->nroutes; i++)
        if ((dst & s->routes[i].mask) == s->routes[i].net) {
            found = i;
            break;
        }
    s->cache_key[slot] = dst;
    s->cache_val[slot] = found >= 0 ? found + 1 : -1;
    return found >= 0 ? &s->routes[found] : NULL;
}

/* ----- egress: Port.offer / Port.service / Port._wire / TrimmingQueue ------------------------ */

static void rx_batch_one(Core *c, int gid, Frame *f, double now);

static void active_add(Core *c, Port *p) {
    if (p->in_active) return;
    if (grow((void **)&c->active, &c->active_cap, sizeof(Port *), c->active_n + 1)) {
        c->error = 1;
        return;
    }
    p->in_active = 1;
    c->active[c->active_n++] = p;
}

static void transmit(Core *c, Port *p, Frame *f) {
    uint32_t n = f->len;
    if (p->peer >= 0) { /* LocalWire.send */
        c->delivered++;
        rx_batch_one(c, p->peer, f, c->now);
    } else {
        if (grow((void **)&c->egress, &c->egress_cap, sizeof(Egress), c->egress_n + 1)) {
            c->error = 1;
            frame_free(c, f);
            return;
        }
        c->egress[c->egress_n].sw = p->sw;
        c->egress[c->egress_n].port = p->index;
        c->egress[c->egress_n].f = f;
        c->egress_n++;
    }
    p->tx_packets++;
    p->tx_bytes += n;
}

static void wire(Core *c, Port *p, Frame *f) {
    if (p->blackhole) {
        p->drop_blackhole++;
        frame_free(c, f);
        return;
    }
    transmit(c, p, f);
}

static int enqueue_prio(Core *c, Port *p, Frame *f) {
    int64_t size = f->len;
    if (p->prio_bytes + size > p->prio_limit) {
        p->drop_prio_full++;
        frame_free(c, f);
        return 0;
    }
    if (fq_push(&p->prio, f)) {
        c->error = 1;
        frame_free(c, f);
        return 0;
    }
    p->prio_bytes += size;
    if (p->prio_bytes > p->max_prio) p->max_prio = p->prio_bytes;
    return 1;
}

/* TrimmingQueue.enqueue; returns 1 if the frame (or its header) was queued */
static int enqueue(Core *c, Sw *s, Port *p, Frame *f) {
    uint8_t *d = f->data;
    int dscp = d[15] >> 2;
    if (dscp == s->control || dscp == s->trimmed) return enqueue_prio(c, p, f);
    int64_t size = f->len;
    if (p->data_bytes + size <= p->data_limit) {
        if (p->data_bytes > p->ecn_threshold && mark_ce(d)) p->ecn_marks++;
        if (fq_push(&p->data, f)) {
            c->error = 1;
            frame_free(c, f);
            return 0;
        }
        p->data_bytes += size;
        if (p->data_bytes > p->max_data) p->max_data = p->data_bytes;
        return 1;
    }
    if (s->trimming && dscp == s->trimmable && d[23] == 17) {
        trim(f, s->trim_bytes, s->trimmed);
        if (enqueue_prio(c, p, f)) {
            p->trims++;
            return 1;
        }
        return 0;
    }
    p->drop_queue_full++;
    frame_free(c, f);
    return 0;
}

static double py_floordiv(double vx, double wx) { /* CPython's float floor division */
    double mod = fmod(vx, wx), div = (vx - mod) / wx, floordiv;
    if (mod) {
        if ((wx < 0) != (mod < 0)) div -= 1.0;
    }
    if (div) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, vx / wx);
    }
    return floordiv;
}

static void qmax_roll(Port *p, double now) { /* QueueMaxima.roll */
    if (p->qm_peak > 0) {
        uint32_t i;
        if (p->qm_count == QMAX_RING) {
            p->qm_lost++;
            p->qm_head = (p->qm_head + 1) % QMAX_RING;
            p->qm_count--;
        }
        i = (p->qm_head + p->qm_count) % QMAX_RING;
        p->qm_ring_t[i] = p->qm_start;
        p->qm_ring_b[i] = p->qm_peak;
        p->qm_count++;
    }
    double k = py_floordiv(now, p->qm_interval);
    p->qm_start = k * p->qm_interval;
    p->qm_until = p->qm_start + p->qm_interval;
    p->qm_peak = 0;
}

static void offer(Core *c, Port *p, Frame *f, double now) {
    if (!p->up) {
        p->drop_link_down++;
        frame_free(c, f);
        return;
    }
    double spb = p->spb, delay = p->delay;
    if (spb != 0.0 || delay != 0.0) {
        if (p->data.count || p->prio.count || p->busy_until > now + p->early) {
            if (enqueue(c, c->sws[p->sw], p, f)) active_add(c, p);
            if (now >= p->qm_until) qmax_roll(p, now);
            if (p->data_bytes > p->qm_peak) p->qm_peak = p->data_bytes;
            return;
        }
        double busy = p->busy_until;
        busy = (busy > now - p->slack ? busy : now) + (double)f->len * spb;
        p->busy_until = busy;
        if (delay != 0.0 || busy > now + p->early || p->inflight.count) {
            if (flq_push(&p->inflight, busy + delay, f)) {
                c->error = 1;
                frame_free(c, f);
                return;
            }
            active_add(c, p);
            return;
        }
    }
    wire(c, p, f);
}

/* Port.service: returns 1 and the next time in *next, or 0 if idle */
static int service(Core *c, Port *p, double now, double *next) {
    if (p->data.count || p->prio.count) {
        double busy = p->busy_until, floor_ = now - p->catch_up, spb = p->spb, delay = p->delay;
        while (busy <= now + p->early) {
            Frame *f;
            if (p->prio.count) {
                f = fq_pop(&p->prio);
                p->prio_bytes -= f->len;
            } else if (p->data.count) {
                f = fq_pop(&p->data);
                p->data_bytes -= f->len;
            } else {
                break;
            }
            double start = busy > floor_ ? busy : now;
            busy = start + (double)f->len * spb;
            if (delay == 0.0 && busy <= now + p->early && !p->inflight.count) {
                wire(c, p, f);
            } else if (flq_push(&p->inflight, busy + delay, f)) {
                c->error = 1;
                frame_free(c, f);
            }
        }
        p->busy_until = busy;
    }
    while (p->inflight.count && p->inflight.buf[p->inflight.head].t <= now + p->early)
        wire(c, p, flq_pop(&p->inflight));
    int has = 0;
    double nxt = 0.0;
    if (p->data.count || p->prio.count) {
        nxt = p->busy_until;
        has = 1;
    }
    if (p->inflight.count) {
        double t = p->inflight.buf[p->inflight.head].t;
        if (!has || t < nxt) {
            nxt = t;
            has = 1;
        }
    }
    *next = nxt;
    return has;
}

static uint64_t flush_port(Core *c, Port *p) {
    uint64_t n = (uint64_t)p->data.count + p->prio.count + p->inflight.count;
    while (p->data.count) frame_free(c, fq_pop(&p->data));
    while (p->prio.count) frame_free(c, fq_pop(&p->prio));
    while (p->inflight.count) frame_free(c, flq_pop(&p->inflight));
    p->data_bytes = p->prio_bytes = 0;
    return n;
}

/* ----- receive: Switch.receive_batch's inline path ------------------------------------------ */

static void exception(Core *c, Port *rx, const uint8_t *d, uint32_t n, double now) {
    c->exceptions++;
    if (!c->slow || c->slow == Py_None) return;
    PyObject *frame = PyByteArray_FromStringAndSize((const char *)d, n);
    if (!frame) {
        c->error = 1;
        return;
    }
    PyObject *r = PyObject_CallFunction(c->slow, "iiNd", rx->sw, rx->index, frame, now);
    if (!r)
        c->error = 1;
    else
        Py_DECREF(r);
}

/* One frame arriving on `rx`: forwarded here, or handed to the slow path. `owned`: the frame
 * already sits in a slot (an in-memory wire); else `d` is borrowed and copied if forwarded. */
static void rx_frame(Core *c, Sw *s, Port *rx, const uint8_t *d, uint32_t n, Frame *owned,
                     double now) {
    if (n < 34 || d[12] != 8 || d[13] != 0 || d[14] != 0x45) goto slow;
    uint32_t sum = 0;
    for (int i = 14; i < 34; i += 2) sum += ((uint32_t)d[i] << 8) | d[i + 1];
    uint32_t totlen = ((uint32_t)d[16] << 8) | d[17];
    if (sum % 0xFFFF || d[22] <= 1 || totlen < 20 || totlen > n - 14) goto slow;
    uint32_t dst = ((uint32_t)d[30] << 24) | ((uint32_t)d[31] << 16) | ((uint32_t)d[32] << 8) | d[33];
    Route *r = fib_lookup(s, dst);
    if (!r || !r->nlive) goto slow;
    int m;
    if (r->nlive == 1) {
        m = r->live[0];
    } else {
        uint32_t proto = d[23];
        if (s->source_routed && proto == 17 && n >= 38 && (((uint32_t)d[36] << 8) | d[37]) == ROCE_PORT) {
            uint32_t ev = ((uint32_t)d[34] << 8) | d[35];
            m = r->table[(s->plane_bits < 16 ? ev >> s->plane_bits : 0) & (BUCKETS - 1)];
        } else {
            size_t len = proto == 17 || proto == 6 ? (n < 38 ? n : 38) - 26 : 8;
            uint32_t h = crc32z(d + 26, len, s->seed ^ proto);
            if (s->mixed) h = mix32(h);
            m = r->table[h & (BUCKETS - 1)];
        }
    }
    Frame *f = owned;
    if (!f) {
        f = frame_new(c, n);
        if (!f) {
            c->error = 1;
            return;
        }
        memcpy(f->data, d, n);
    }
    uint8_t *w = f->data;
    w[22] = w[22] - 1;
    uint32_t cs = (((uint32_t)w[24] << 8) | w[25]) + 0x100;
    cs = (cs & 0xFFFF) + (cs >> 16);
    if (cs == 0xFFFF) cs = 0;
    w[24] = cs >> 8;
    w[25] = cs & 0xFF;
    memcpy(w, r->ml2 + 12 * m, 12);
    offer(c, c->ports[s->first_gid + r->mport[m]], f, now);
    return;
slow:
    exception(c, rx, d, n, now);
    if (owned) frame_free(c, owned);
}

static void rx_batch_one(Core *c, int gid, Frame *f, double now) {
    Port *rx = c->ports[gid];
    Sw *s = c->sws[rx->sw];
    uint32_t n = f->len;
    if (!(s->fast && rx->rx_clean)) {
        rx->rx_packets++;
        rx->rx_bytes += n;
        exception(c, rx, f->data, n, now);
        frame_free(c, f);
        return;
    }
    rx_frame(c, s, rx, f->data, n, f, now);
    rx->rx_packets++;
    rx->rx_bytes += n;
}

/* ----- ActivePorts.serve -------------------------------------------------------------------- */

static int heap_less(const HeapEntry *a, const HeapEntry *b) {
    if (a->t != b->t) return a->t < b->t;
    if (a->seq != b->seq) return a->seq < b->seq;
    return a->n < b->n;
}

static void heap_push(Core *c, HeapEntry e) {
    if (grow((void **)&c->heap, &c->heap_cap, sizeof(HeapEntry), c->heap_n + 1)) {
        c->error = 1;
        return;
    }
    int i = c->heap_n++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!heap_less(&e, &c->heap[parent])) break;
        c->heap[i] = c->heap[parent];
        i = parent;
    }
    c->heap[i] = e;
}

static void heap_pop(Core *c) {
    HeapEntry last = c->heap[--c->heap_n];
    int i = 0, n = c->heap_n;
    if (!n) return;
    for (;;) {
        int l = 2 * i + 1, m = i;
        const HeapEntry *best = &last;
        if (l < n && heap_less(&c->heap[l], best)) {
            m = l;
            best = &c->heap[l];
        }
        if (l + 1 < n && heap_less(&c->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    c->heap[i] = last;
}

static int cmp_seq(const void *a, const void *b) {
    int x = (*(Port *const *)a)->gid, y = (*(Port *const *)b)->gid;
    return (x > y) - (x < y);
}

static int serve(Core *c, double now, double *next) {
    uint64_t epoch = ++c->epoch;
    int nd = 0;
    for (int i = 0; i < c->active_n; i++) {
        Port *p = c->active[i];
        p->in_active = 0;
        if (p->mark != epoch) {
            p->mark = epoch;
            c->due[nd++] = p;
        }
    }
    c->active_n = 0;
    while (c->heap_n) {
        HeapEntry *e = &c->heap[0];
        Port *p = c->ports[e->gid];
        if ((uint64_t)p->sched != e->n || p->sched < 0) {
            heap_pop(c);
        } else if (e->t <= now + p->early) {
            heap_pop(c);
            if (p->mark != epoch) {
                p->mark = epoch;
                c->due[nd++] = p;
            }
        } else {
            break;
        }
    }
    if (nd > 1) qsort(c->due, nd, sizeof(Port *), cmp_seq);
    /* `due` is ours until the pass ends: serve is never re-entered (wires only offer) */
    for (int i = 0; i < nd; i++) {
        Port *p = c->due[i];
        double t;
        if (!service(c, p, now, &t)) {
            p->sched = -1;
        } else {
            HeapEntry e = {t, p->gid, c->counter++, p->gid};
            p->sched = (int64_t)e.n;
            heap_push(c, e);
        }
    }
    while (c->heap_n && (c->ports[c->heap[0].gid]->sched < 0 ||
                         (uint64_t)c->ports[c->heap[0].gid]->sched != c->heap[0].n))
        heap_pop(c);
    if (!c->heap_n) return 0;
    *next = c->heap[0].t;
    return 1;
}

/* ----- the Python type ---------------------------------------------------------------------- */

static Port *get_port(Core *c, int sw, int port) {
    if (sw < 0 || sw >= c->nsw || port < 0 || port >= c->sws[sw]->nports) {
        PyErr_Format(PyExc_IndexError, "no port %d of switch %d", port, sw);
        return NULL;
    }
    return c->ports[c->sws[sw]->first_gid + port];
}

static PyObject *finish(Core *c, PyObject *result) {
    if (c->error) {
        c->error = 0;
        Py_XDECREF(result);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    return result;
}

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    unsigned int slot;
    PyObject *slow = Py_None;
    if (!PyArg_ParseTuple(args, "I|O", &slot, &slow)) return -1;
    c->slot = slot < 64 ? 64 : slot;
    Py_INCREF(slow);
    Py_XSETREF(c->slow, slow);
    return 0;
}

static void Core_dealloc(Core *c) {
    for (int i = 0; i < c->nports; i++) {
        Port *p = c->ports[i];
        flush_port(c, p);
        free(p->data.buf);
        free(p->prio.buf);
        free(p->inflight.buf);
        free(p);
    }
    for (int i = 0; i < c->egress_n; i++) frame_free(c, c->egress[i].f);
    for (int i = 0; i < c->nsw; i++) {
        Sw *s = c->sws[i];
        for (int r = 0; r < s->nroutes; r++) {
            free(s->routes[r].mport);
            free(s->routes[r].ml2);
            free(s->routes[r].live);
        }
        free(s->routes);
        free(s);
    }
    for (int i = 0; i < c->nchunks; i++) free(c->chunks[i]);
    free(c->chunks);
    free(c->sws);
    free(c->ports);
    free(c->heap);
    free(c->active);
    free(c->due);
    free(c->egress);
    Py_XDECREF(c->slow);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Core_add_switch(Core *c, PyObject *args) {
    unsigned int seed;
    int mixed, sr, pb, tb, trimming, ta, td, ct;
    if (!PyArg_ParseTuple(args, "Ippiipiii", &seed, &mixed, &sr, &pb, &tb, &trimming, &ta, &td,
                          &ct))
        return NULL;
    if (tb < 34) return PyErr_Format(PyExc_ValueError, "the C core needs trim_bytes >= 34, got %d", tb);
    if (pb < 0) return PyErr_Format(PyExc_ValueError, "plane_bits < 0");
    Sw *s = calloc(1, sizeof(Sw));
    if (!s) return PyErr_NoMemory();
    int cap = c->nsw;
    if (grow((void **)&c->sws, &cap, sizeof(Sw *), c->nsw + 1)) {
        free(s);
        return PyErr_NoMemory();
    }
    *s = (Sw){.seed = seed, .mixed = mixed, .source_routed = sr, .plane_bits = pb,
              .trim_bytes = tb, .trimming = trimming, .trimmable = ta, .trimmed = td,
              .control = ct, .fast = 1, .first_gid = c->nports};
    c->sws[c->nsw] = s;
    return PyLong_FromLong(c->nsw++);
}

static PyObject *Core_add_port(Core *c, PyObject *args) {
    int sw;
    double spb, delay, early, catch_up, slack, qmi;
    long long dl, pl, et;
    if (!PyArg_ParseTuple(args, "idddddLLLd", &sw, &spb, &delay, &early, &catch_up, &slack, &dl,
                          &pl, &et, &qmi))
        return NULL;
    if (sw != c->nsw - 1) return PyErr_Format(PyExc_ValueError, "ports are added to the last switch");
    if (!(qmi > 0)) return PyErr_Format(PyExc_ValueError, "queue_max_interval_s must be > 0");
    Sw *s = c->sws[sw];
    Port *p = calloc(1, sizeof(Port));
    if (!p) return PyErr_NoMemory();
    int cap = c->nports;
    if (grow((void **)&c->ports, &cap, sizeof(Port *), c->nports + 1)) {
        free(p);
        return PyErr_NoMemory();
    }
    cap = c->nports;
    if (grow((void **)&c->due, &cap, sizeof(Port *), c->nports + 1)) {
        free(p);
        return PyErr_NoMemory();
    }
    p->sw = sw;
    p->index = s->nports++;
    p->gid = c->nports;
    p->spb = spb;
    p->delay = delay;
    p->early = early;
    p->catch_up = catch_up;
    p->slack = slack;
    p->data_limit = dl;
    p->prio_limit = pl;
    p->ecn_threshold = et;
    p->up = p->rx_clean = 1;
    p->peer = -1;
    p->qm_interval = qmi;
    p->sched = -1;
    c->ports[c->nports++] = p;
    return PyLong_FromLong(p->index);
}

static int route_cmp(const void *a, const void *b) {
    return ((const Route *)b)->plen - ((const Route *)a)->plen;
}

static PyObject *Core_add_route(Core *c, PyObject *args) {
    int sw, plen;
    unsigned int net;
    PyObject *members;
    if (!PyArg_ParseTuple(args, "iiIO!", &sw, &plen, &net, &PyList_Type, &members)) return NULL;
    if (sw < 0 || sw >= c->nsw || plen < 0 || plen > 32)
        return PyErr_Format(PyExc_ValueError, "bad route");
    Sw *s = c->sws[sw];
    int n = (int)PyList_GET_SIZE(members);
    Route r = {.plen = plen, .n = n};
    r.mask = plen ? 0xFFFFFFFFu << (32 - plen) : 0;
    r.net = net & r.mask;
    r.mport = calloc(n + 1, sizeof(int));
    r.ml2 = calloc(n + 1, 12);
    r.live = calloc(n + 1, sizeof(int));
    if (!r.mport || !r.ml2 || !r.live) goto nomem;
    for (int i = 0; i < n; i++) {
        int port;
        const char *l2;
        Py_ssize_t l2n;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(members, i), "iy#", &port, &l2, &l2n)) goto fail;
        if (port < 0 || port >= s->nports || l2n != 12) {
            PyErr_SetString(PyExc_ValueError, "a member is (port index, 12 bytes of L2)");
            goto fail;
        }
        r.mport[i] = port;
        memcpy(r.ml2 + 12 * i, l2, 12);
        r.live[i] = i;
    }
    r.nlive = n;
    route_rebuild(&r);
    for (int i = 0; i < s->nroutes; i++)
        if (s->routes[i].plen == plen && s->routes[i].net == r.net) { /* a dict: the last wins */
            free(s->routes[i].mport);
            free(s->routes[i].ml2);
            free(s->routes[i].live);
            s->routes[i] = r;
            memset(s->cache_val, 0, sizeof s->cache_val);
            Py_RETURN_NONE;
        }
    int cap = s->nroutes;
    if (grow((void **)&s->routes, &cap, sizeof(Route), s->nroutes + 1)) goto nomem;
    s->routes[s->nroutes++] = r;
    qsort(s->routes, s->nroutes, sizeof(Route), route_cmp);
    memset(s->cache_val, 0, sizeof s->cache_val);
    Py_RETURN_NONE;
nomem:
    PyErr_NoMemory();
fail:
    free(r.mport);
    free(r.ml2);
    free(r.live);
    return NULL;
}

static PyObject *Core_wire(Core *c, PyObject *args) {
    int sw, port, psw, pport;
    if (!PyArg_ParseTuple(args, "iiii", &sw, &port, &psw, &pport)) return NULL;
    Port *p = get_port(c, sw, port), *q = p ? get_port(c, psw, pport) : NULL;
    if (!q) return NULL;
    p->peer = q->gid;
    Py_RETURN_NONE;
}

static PyObject *Core_receive(Core *c, PyObject *args) {
    int sw, port;
    PyObject *frames;
    double now;
    if (!PyArg_ParseTuple(args, "iiOd", &sw, &port, &frames, &now)) return NULL;
    Port *rx = get_port(c, sw, port);
    if (!rx) return NULL;
    PyObject *seq = PySequence_Fast(frames, "frames: a sequence of bytes-like objects");
    if (!seq) return NULL;
    Sw *s = c->sws[sw];
    c->now = now;
    Py_ssize_t nf = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int clean = s->fast && rx->rx_clean;
    uint64_t nbytes = 0;
    for (Py_ssize_t i = 0; i < nf; i++) {
        Py_buffer b;
        if (PyObject_GetBuffer(items[i], &b, PyBUF_SIMPLE) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        if ((size_t)b.len > 0xFFFFFFF0u) {
            PyBuffer_Release(&b);
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "frame too long");
        }
        uint32_t n = (uint32_t)b.len;
        nbytes += n;
        if (!clean) {
            rx->rx_packets++;
            rx->rx_bytes += n;
            exception(c, rx, b.buf, n, now);
        } else {
            rx_frame(c, s, rx, b.buf, n, NULL, now);
        }
        PyBuffer_Release(&b);
        if (c->error) break;
    }
    if (clean) {
        rx->rx_packets += nf;
        rx->rx_bytes += nbytes;
    }
    Py_DECREF(seq);
    return finish(c, Py_NewRef(Py_None));
}

static PyObject *Core_offer(Core *c, PyObject *args) {
    int sw, port;
    Py_buffer b;
    double now;
    if (!PyArg_ParseTuple(args, "iiy*d", &sw, &port, &b, &now)) return NULL;
    Port *p = get_port(c, sw, port);
    if (!p || b.len < 34 || b.len > 0xFFFFFFF0) {
        PyBuffer_Release(&b);
        if (p) PyErr_SetString(PyExc_ValueError, "offer: an IPv4 frame of at least 34 bytes");
        return NULL;
    }
    Frame *f = frame_new(c, (uint32_t)b.len);
    if (!f) {
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    memcpy(f->data, b.buf, b.len);
    PyBuffer_Release(&b);
    offer(c, p, f, now);
    return finish(c, Py_NewRef(Py_None));
}

static PyObject *Core_service(Core *c, PyObject *args) {
    double now, next = 0.0;
    if (!PyArg_ParseTuple(args, "d", &now)) return NULL;
    c->now = now;
    uint64_t before = c->delivered;
    int has = serve(c, now, &next);
    while (c->delivered != before && !c->error) { /* switch/loop.py: again while a wire delivered */
        before = c->delivered;
        has = serve(c, now, &next);
    }
    return finish(c, has ? PyFloat_FromDouble(next) : Py_NewRef(Py_None));
}

static PyObject *Core_take_egress(Core *c, PyObject *unused) {
    PyObject *out = PyList_New(c->egress_n);
    if (!out) return NULL;
    for (int i = 0; i < c->egress_n; i++) {
        Egress *e = &c->egress[i];
        PyObject *t = Py_BuildValue("iiy#", e->sw, e->port, (const char *)e->f->data, (Py_ssize_t)e->f->len);
        if (!t) {
            Py_DECREF(out);
            return NULL; /* the frames stay: a retry gets them */
        }
        PyList_SET_ITEM(out, i, t);
    }
    for (int i = 0; i < c->egress_n; i++) frame_free(c, c->egress[i].f);
    c->egress_n = 0;
    return out;
}

static PyObject *Core_discard_egress(Core *c, PyObject *unused) {
    int n = c->egress_n;
    for (int i = 0; i < n; i++) frame_free(c, c->egress[i].f);
    c->egress_n = 0;
    return PyLong_FromLong(n);
}

static PyObject *Core_port_stats(Core *c, PyObject *args) {
    int sw, port;
    if (!PyArg_ParseTuple(args, "ii", &sw, &port)) return NULL;
    Port *p = get_port(c, sw, port);
    if (!p) return NULL;
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsLsLsLsL}", "rx_packets", p->rx_packets, "rx_bytes", p->rx_bytes,
        "tx_packets", p->tx_packets, "tx_bytes", p->tx_bytes, "link_down", p->drop_link_down,
        "blackhole", p->drop_blackhole, "queue_full", p->drop_queue_full, "prio_queue_full",
        p->drop_prio_full, "switch_down", p->drop_switch_down, "trims", p->trims, "ecn_marks",
        p->ecn_marks, "queue_bytes", (long long)p->data_bytes, "prio_queue_bytes",
        (long long)p->prio_bytes, "max_queue_bytes", (long long)p->max_data,
        "max_prio_queue_bytes", (long long)p->max_prio);
}

static PyObject *Core_queue_max(Core *c, PyObject *args) {
    /* QueueMaxima.drain, unrounded: (closed intervals, the open one or None, lost) */
    int sw, port;
    if (!PyArg_ParseTuple(args, "ii", &sw, &port)) return NULL;
    Port *p = get_port(c, sw, port);
    if (!p) return NULL;
    PyObject *closed = PyList_New(p->qm_count);
    if (!closed) return NULL;
    for (uint32_t i = 0; i < p->qm_count; i++) {
        uint32_t k = (p->qm_head + i) % QMAX_RING;
        PyObject *t = Py_BuildValue("(dL)", p->qm_ring_t[k], (long long)p->qm_ring_b[k]);
        if (!t) {
            Py_DECREF(closed);
            return NULL;
        }
        PyList_SET_ITEM(closed, i, t);
    }
    p->qm_head = p->qm_count = 0;
    if (p->qm_peak > 0)
        return Py_BuildValue("(N(dL)K)", closed, p->qm_start, (long long)p->qm_peak, p->qm_lost);
    return Py_BuildValue("(NOK)", closed, Py_None, p->qm_lost);
}

static PyObject *Core_set_port_up(Core *c, PyObject *args) {
    int sw, port, up;
    if (!PyArg_ParseTuple(args, "iip", &sw, &port, &up)) return NULL;
    Port *p = get_port(c, sw, port);
    if (!p) return NULL;
    if (up == p->up) Py_RETURN_NONE;
    p->up = up;
    if (!up) p->drop_link_down += flush_port(c, p);
    Sw *s = c->sws[sw];
    for (int i = 0; i < s->nroutes; i++) { /* Fib.set_port_state */
        Route *r = &s->routes[i];
        int has = 0;
        for (int m = 0; m < r->n; m++) has |= r->mport[m] == port;
        if (!has) continue;
        r->nlive = 0;
        for (int m = 0; m < r->n; m++)
            if (c->ports[s->first_gid + r->mport[m]]->up) r->live[r->nlive++] = m;
        route_rebuild(r);
    }
    Py_RETURN_NONE;
}

static PyObject *Core_set_port(Core *c, PyObject *args) {
    /* set_port(sw, port, spb, delay, blackhole, rx_clean): egress rate, delay and flags */
    int sw, port, bh, rxc;
    double spb, delay;
    if (!PyArg_ParseTuple(args, "iiddpp", &sw, &port, &spb, &delay, &bh, &rxc)) return NULL;
    Port *p = get_port(c, sw, port);
    if (!p) return NULL;
    p->spb = spb;
    p->delay = delay;
    p->blackhole = bh;
    p->rx_clean = rxc;
    Py_RETURN_NONE;
}

static PyObject *Core_set_switch_up(Core *c, PyObject *args) {
    int sw, up;
    if (!PyArg_ParseTuple(args, "ip", &sw, &up)) return NULL;
    if (sw < 0 || sw >= c->nsw) return PyErr_Format(PyExc_IndexError, "no switch %d", sw);
    Sw *s = c->sws[sw];
    s->fast = up;
    if (!up)
        for (int i = 0; i < s->nports; i++) {
            Port *p = c->ports[s->first_gid + i];
            p->drop_switch_down += flush_port(c, p);
        }
    Py_RETURN_NONE;
}

static PyObject *Core_stats(Core *c, PyObject *unused) {
    return Py_BuildValue("{sKsKsi}", "delivered", c->delivered, "exceptions", c->exceptions,
                         "egress_pending", c->egress_n);
}

static PyMethodDef Core_methods[] = {
    {"add_switch", (PyCFunction)Core_add_switch, METH_VARARGS,
     "add_switch(seed, mixed, source_routed, plane_bits, trim_bytes, trimming, trimmable, "
     "trimmed, control) -> switch index"},
    {"add_port", (PyCFunction)Core_add_port, METH_VARARGS,
     "add_port(sw, sec_per_byte, delay_s, early, catch_up, slack, data_limit, prio_limit, "
     "ecn_threshold, queue_max_interval_s) -> port index"},
    {"add_route", (PyCFunction)Core_add_route, METH_VARARGS,
     "add_route(sw, prefixlen, network, [(port, l2 12 bytes), ...]); no members: local"},
    {"wire", (PyCFunction)Core_wire, METH_VARARGS, "wire(sw, port, peer_sw, peer_port)"},
    {"receive", (PyCFunction)Core_receive, METH_VARARGS, "receive(sw, port, frames, now)"},
    {"offer", (PyCFunction)Core_offer, METH_VARARGS, "offer(sw, port, frame, now): Port.offer"},
    {"service", (PyCFunction)Core_service, METH_VARARGS, "service(now) -> next deadline or None"},
    {"take_egress", (PyCFunction)Core_take_egress, METH_NOARGS, "[(sw, port, bytes)]"},
    {"discard_egress", (PyCFunction)Core_discard_egress, METH_NOARGS, "drop them, -> count"},
    {"port_stats", (PyCFunction)Core_port_stats, METH_VARARGS, "port_stats(sw, port) -> dict"},
    {"queue_max", (PyCFunction)Core_queue_max, METH_VARARGS, "queue_max(sw, port): drain"},
    {"set_port_up", (PyCFunction)Core_set_port_up, METH_VARARGS, "set_port_up(sw, port, up)"},
    {"set_port", (PyCFunction)Core_set_port, METH_VARARGS,
     "set_port(sw, port, sec_per_byte, delay_s, blackhole, rx_clean)"},
    {"set_switch_up", (PyCFunction)Core_set_switch_up, METH_VARARGS, "set_switch_up(sw, up)"},
    {"stats", (PyCFunction)Core_stats, METH_NOARGS, "process-wide counters"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "switch._core.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Core(slot_bytes, slow=None): every switch of a process, forwarding in C",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "switch._core",
    .m_doc = "The switch's forwarding core in C (switch/core.py).", .m_size = -1};

PyMODINIT_FUNC PyInit__core(void) {
    crc_init();
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
