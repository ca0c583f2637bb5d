/* Load generator and probe receiver for `testbed bench switch`.
 *
 * Compiled by testbed/bench/switch_bench.py at bench time (gcc -O2) into a cache directory and
 * recompiled whenever this source changes. Two modes:
 *
 *   loadgen send IF SRC_MAC DST_MAC FRAME_BYTES DURATION_S PPS TOS FLOWS PROBE_HZ
 *     Sends Ether/IPv4(10.1.1.1 -> 10.1.2.1, ttl 64)/UDP(sport 49152+k, dport 4791)/zeros
 *     frames of FRAME_BYTES on an AF_PACKET socket with PACKET_QDISC_BYPASS, in sendmmsg
 *     batches, for DURATION_S seconds: as fast as it can when PPS is 0, else paced at PPS.
 *     PPS < 0 sends no load at all (probes only).
 *     PROBE_HZ > 0 adds timestamped probe frames (DSCP 0, sport 4000, 100 B) carrying
 *     CLOCK_MONOTONIC at send time; CLOCK_MONOTONIC is one clock for all namespaces.
 *     Prints one JSON line: {"sent": N, "sent_bytes": B, "probes": P, "errors": E, "elapsed_s": T}.
 *
 *   loadgen recv IF DURATION_S
 *     Receives on IF for DURATION_S seconds and prints the sequence number and one-way delay of
 *     every probe seen, as JSON: {"probes": N, "frames": M, "seq": [...], "delay_us": [...]}.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif

#define BATCH 64
#define MAX_FLOWS 64
#define PROBE_BYTES 100
#define PROBE_SPORT 4000
#define PROBE_MAGIC "TBPROBE1"
#define PAYLOAD_OFF 42 /* 14 Ethernet + 20 IPv4 + 8 UDP */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_mac(const char *s, uint8_t *mac) {
    unsigned v[6];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return -1;
    for (int i = 0; i < 6; i++) mac[i] = (uint8_t)v[i];
    return 0;
}

static uint16_t ip_checksum(const uint8_t *hdr) {
    uint32_t s = 0;
    for (int i = 0; i < 20; i += 2) s += (uint32_t)(hdr[i] << 8 | hdr[i + 1]);
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static void build_frame(uint8_t *f, int len, const uint8_t *src, const uint8_t *dst, int tos,
                        int sport) {
    memset(f, 0, (size_t)len);
    memcpy(f, dst, 6);
    memcpy(f + 6, src, 6);
    f[12] = 0x08;
    f[13] = 0x00;
    uint8_t *ip = f + 14;
    int totlen = len - 14;
    ip[0] = 0x45;
    ip[1] = (uint8_t)tos;
    ip[2] = (uint8_t)(totlen >> 8);
    ip[3] = (uint8_t)totlen;
    ip[6] = 0x40; /* DF */
    ip[8] = 64;
    ip[9] = 17;
    ip[12] = 10, ip[13] = 1, ip[14] = 1, ip[15] = 1;
    ip[16] = 10, ip[17] = 1, ip[18] = 2, ip[19] = 1;
    uint16_t c = ip_checksum(ip);
    ip[10] = (uint8_t)(c >> 8);
    ip[11] = (uint8_t)c;
    uint8_t *udp = ip + 20;
    int ulen = totlen - 20;
    udp[0] = (uint8_t)(sport >> 8);
    udp[1] = (uint8_t)sport;
    udp[2] = 4791 >> 8;
    udp[3] = 4791 & 0xff;
    udp[4] = (uint8_t)(ulen >> 8);
    udp[5] = (uint8_t)ulen;
}

static int open_socket(const char *ifname, int bypass) {
    int fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: this socket never receives */
    if (fd < 0) {
        perror("socket");
        exit(1);
    }
    int one = 1;
    if (bypass) setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = 0;
    sll.sll_ifindex = (int)if_nametoindex(ifname);
    if (!sll.sll_ifindex) {
        fprintf(stderr, "loadgen: no interface %s\n", ifname);
        exit(1);
    }
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
        perror("bind");
        exit(1);
    }
    return fd;
}

static int do_send(int argc, char **argv) {
    if (argc != 11) {
        fprintf(stderr, "usage: loadgen send IF SRC DST BYTES DURATION PPS TOS FLOWS PROBE_HZ\n");
        return 2;
    }
    const char *ifname = argv[2];
    uint8_t src[6], dst[6];
    if (parse_mac(argv[3], src) || parse_mac(argv[4], dst)) {
        fprintf(stderr, "loadgen: bad MAC\n");
        return 2;
    }
    int len = atoi(argv[5]);
    double duration = atof(argv[6]);
    double pps = atof(argv[7]);
    int tos = atoi(argv[8]);
    int flows = atoi(argv[9]);
    double probe_hz = atof(argv[10]);
    if (len < 60 || len > 1514 || flows < 1 || flows > MAX_FLOWS || duration <= 0) {
        fprintf(stderr, "loadgen: bad arguments\n");
        return 2;
    }
    int fd = open_socket(ifname, 1);
    static uint8_t frames[MAX_FLOWS][1514];
    for (int k = 0; k < flows; k++) build_frame(frames[k], len, src, dst, tos, 49152 + k);
    static uint8_t probe[PROBE_BYTES];
    build_frame(probe, PROBE_BYTES, src, dst, 0, PROBE_SPORT);
    memcpy(probe + PAYLOAD_OFF, PROBE_MAGIC, 8);

    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = frames[i % flows];
        iov[i].iov_len = (size_t)len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint64_t t0 = now_ns();
    uint64_t end = t0 + (uint64_t)(duration * 1e9);
    uint64_t sent = 0, errors = 0, probes = 0, probe_seq = 0;
    uint64_t probe_period = probe_hz > 0 ? (uint64_t)(1e9 / probe_hz) : 0;
    uint64_t next_probe = t0 + probe_period;
    /* Pacing: wake up every ~100 us and send what is due, so bursts stay a few frames. */
    double ns_per_pkt = pps > 0 ? 1e9 / pps : 0;
    for (;;) {
        uint64_t t = now_ns();
        if (t >= end) break;
        if (probe_period && t >= next_probe) {
            uint64_t ts = now_ns();
            memcpy(probe + PAYLOAD_OFF + 8, &probe_seq, 8);
            memcpy(probe + PAYLOAD_OFF + 16, &ts, 8);
            if (send(fd, probe, PROBE_BYTES, 0) == PROBE_BYTES) probes++;
            probe_seq++;
            next_probe += probe_period;
            if (next_probe < t) next_probe = t + probe_period;
        }
        int n = BATCH;
        if (pps < 0) { /* probes only */
            uint64_t wake = probe_period ? next_probe : t + 100000;
            if (wake > end) wake = end;
            struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            continue;
        }
        if (ns_per_pkt > 0) {
            uint64_t due = (uint64_t)((double)(t - t0) / ns_per_pkt) + 1;
            if (due <= sent) {
                uint64_t next = t0 + (uint64_t)((double)sent * ns_per_pkt);
                uint64_t wake = next;
                if (probe_period && next_probe < wake) wake = next_probe;
                if (wake > t + 100000) wake = t + 100000;
                struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                continue;
            }
            if (due - sent < (uint64_t)n) n = (int)(due - sent);
        }
        int first = (int)(sent % (uint64_t)flows);
        for (int i = 0; i < n; i++) iov[i].iov_base = frames[(first + i) % flows];
        int r = sendmmsg(fd, msgs, (unsigned)n, 0);
        if (r < 0) {
            if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) {
                errors++;
                continue;
            }
            perror("sendmmsg");
            return 1;
        }
        sent += (uint64_t)r;
    }
    double elapsed = (double)(now_ns() - t0) / 1e9;
    printf("{\"sent\": %llu, \"sent_bytes\": %llu, \"probes\": %llu, \"errors\": %llu, "
           "\"elapsed_s\": %.6f}\n",
           (unsigned long long)sent, (unsigned long long)(sent * (uint64_t)len),
           (unsigned long long)probes, (unsigned long long)errors, elapsed);
    return 0;
}

static int do_recv(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: loadgen recv IF DURATION\n");
        return 2;
    }
    const char *ifname = argv[2];
    double duration = atof(argv[3]);
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) {
        perror("socket");
        return 1;
    }
    int rcvbuf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)if_nametoindex(ifname);
    if (!sll.sll_ifindex || bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
        fprintf(stderr, "loadgen: cannot bind to %s\n", ifname);
        return 1;
    }
    size_t cap = 1 << 16, count = 0;
    uint32_t *delays = malloc(cap * sizeof *delays);
    uint32_t *seqs = malloc(cap * sizeof *seqs);
    uint64_t frames = 0;
    uint8_t buf[2048];
    uint64_t end = now_ns() + (uint64_t)(duration * 1e9);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        uint64_t t = now_ns();
        if (t >= end) break;
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((end - t) / 1000000ull) + 1;
        if (poll(&p, 1, ms) <= 0) continue;
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        uint64_t rx = now_ns();
        if (n < PAYLOAD_OFF + 24) {
            if (n > 0) frames++;
            continue;
        }
        frames++;
        if (memcmp(buf + PAYLOAD_OFF, PROBE_MAGIC, 8) != 0) continue;
        uint64_t seq, tx;
        memcpy(&seq, buf + PAYLOAD_OFF + 8, 8);
        memcpy(&tx, buf + PAYLOAD_OFF + 16, 8);
        if (rx < tx) continue;
        if (count == cap) {
            cap *= 2;
            delays = realloc(delays, cap * sizeof *delays);
            seqs = realloc(seqs, cap * sizeof *seqs);
            if (!delays || !seqs) {
                fprintf(stderr, "loadgen: out of memory\n");
                return 1;
            }
        }
        seqs[count] = (uint32_t)seq;
        delays[count++] = (uint32_t)((rx - tx) / 1000ull);
    }
    printf("{\"probes\": %zu, \"frames\": %llu, \"seq\": [", count, (unsigned long long)frames);
    for (size_t i = 0; i < count; i++) printf(i ? ", %u" : "%u", seqs[i]);
    printf("], \"delay_us\": [");
    for (size_t i = 0; i < count; i++) printf(i ? ", %u" : "%u", delays[i]);
    printf("]}\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "send") == 0) return do_send(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "recv") == 0) return do_recv(argc, argv);
    fprintf(stderr, "usage: loadgen send|recv ...\n");
    return 2;
}
