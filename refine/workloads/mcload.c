/* mcload: a closed-loop memcached load generator that prints one JSON line per run.
 *
 * Why ours: Debian's memcslap (libmemcached-tools) prints only the total time, and the
 * memcached workload's objective needs a rate and a latency percentile per window.
 *
 * Design: --conns threads (named mcload-N), each with one TCP connection to the server,
 * send one request (GET with probability 1 - --set-pct/100, else SET of --value-bytes bytes,
 * on a key drawn uniformly from --keys), wait for the whole reply, record its latency, then
 * pause --think-us (so the generator stays below one CPU and the service, not the
 * generator, is what the ladder measures: docs/workload.md, validity's generator check).
 * At --seconds every thread stops; the run prints
 *   {"ops_per_s": N, "get_p50_us": N, "get_p99_us": N, "gets": N, "sets": N, "misses": N}
 * and exits 0. A connection that cannot be made or a reply that is not memcached's is an
 * error on stderr and exit 1: a window without a number, never a made-up one.
 *
 * The text protocol only; no dependencies beyond libc. Latencies are kept per thread in a
 * growing array and the percentiles are exact (sorted), since a window has at most some
 * hundred thousand requests.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct options {
    const char *host;
    int port, conns, keys, set_pct, value_bytes, think_us;
    double seconds;
};

struct worker {
    pthread_t thread;
    int index;
    const struct options *opt;
    double deadline;
    uint32_t *get_us;  /* GET latencies, microseconds */
    size_t n_get, cap_get;
    long sets, misses;
    char error[160];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int dial(const struct options *opt, char *error, size_t size) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt->port)};
    if (inet_pton(AF_INET, opt->host, &addr.sin_addr) != 1) {
        snprintf(error, size, "--host %s: not an IPv4 address", opt->host);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        snprintf(error, size, "connect %s:%d: %s", opt->host, opt->port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int send_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read until the reply ends with `end` (GET: "END\r\n"; SET: "\r\n"); the reply's length, or -1. */
static ssize_t read_reply(int fd, char *buf, size_t cap, const char *end) {
    size_t have = 0, end_len = strlen(end);
    while (have < cap) {
        ssize_t n = recv(fd, buf + have, cap - have, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        have += (size_t)n;
        if (have >= end_len && memcmp(buf + have - end_len, end, end_len) == 0) return (ssize_t)have;
    }
    return -1;
}

static int record(struct worker *w, uint32_t us) {
    if (w->n_get == w->cap_get) {
        size_t cap = w->cap_get ? 2 * w->cap_get : 4096;
        uint32_t *grown = realloc(w->get_us, cap * sizeof *grown);
        if (grown == NULL) return -1;
        w->get_us = grown;
        w->cap_get = cap;
    }
    w->get_us[w->n_get++] = us;
    return 0;
}

static void *run_worker(void *arg) {
    struct worker *w = arg;
    const struct options *opt = w->opt;
    char name[16];
    snprintf(name, sizeof name, "mcload-%d", w->index);
    pthread_setname_np(pthread_self(), name);
    int fd = dial(opt, w->error, sizeof w->error);
    if (fd < 0) return NULL;
    size_t cap = (size_t)opt->value_bytes + 256;
    char *request = malloc(cap), *reply = malloc(cap);
    if (request == NULL || reply == NULL) {
        snprintf(w->error, sizeof w->error, "out of memory for %zu-byte buffers", cap);
        free(request);
        free(reply);
        close(fd);
        return NULL;
    }
    unsigned seed = (unsigned)(w->index * 2654435761u) ^ (unsigned)getpid();
    memset(request, 0, cap);
    struct timespec think = {.tv_sec = opt->think_us / 1000000, .tv_nsec = (opt->think_us % 1000000) * 1000L};
    while (now_s() < w->deadline) {
        int key = rand_r(&seed) % opt->keys;
        int is_set = rand_r(&seed) % 100 < opt->set_pct;
        int len;
        if (is_set) {
            len = snprintf(request, cap, "set key:%d 0 0 %d\r\n", key, opt->value_bytes);
            memset(request + len, 'v', (size_t)opt->value_bytes);
            len += opt->value_bytes;
            memcpy(request + len, "\r\n", 2);
            len += 2;
        } else {
            len = snprintf(request, cap, "get key:%d\r\n", key);
        }
        double start = now_s();
        ssize_t got;
        if (send_all(fd, request, (size_t)len) != 0
            || (got = read_reply(fd, reply, cap, is_set ? "\r\n" : "END\r\n")) < 0) {
            snprintf(w->error, sizeof w->error, "connection %d: the server closed or broke the reply", w->index);
            break;
        }
        if (is_set) {
            if (got != 8 || memcmp(reply, "STORED\r\n", 8) != 0) {
                snprintf(w->error, sizeof w->error, "SET not stored: %.*s", (int)(got < 60 ? got : 60), reply);
                break;
            }
            w->sets++;
        } else {
            if (got == 5) w->misses++;  /* "END\r\n" alone: the key was not set yet */
            if (record(w, (uint32_t)((now_s() - start) * 1e6)) != 0) {
                snprintf(w->error, sizeof w->error, "out of memory for latencies");
                break;
            }
        }
        if (opt->think_us > 0) nanosleep(&think, NULL);
    }
    close(fd);
    free(request);
    free(reply);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--host 127.0.0.1] [--port 11211] [--conns 4] [--seconds 5] [--keys 1000]\n"
            "          [--set-pct 10] [--value-bytes 100] [--think-us 200]\n"
            "a closed-loop memcached load; prints one JSON line: ops_per_s, get_p50_us, get_p99_us\n",
            argv0);
}

int main(int argc, char **argv) {
    struct options opt = {"127.0.0.1", 11211, 4, 1000, 10, 100, 200, 5.0};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) { usage(argv[0]); return 0; }
        if (value == NULL) { fprintf(stderr, "mcload: %s needs a value\n", flag); usage(argv[0]); return 2; }
        i++;
        if (strcmp(flag, "--host") == 0) opt.host = value;
        else if (strcmp(flag, "--port") == 0) opt.port = atoi(value);
        else if (strcmp(flag, "--conns") == 0) opt.conns = atoi(value);
        else if (strcmp(flag, "--seconds") == 0) opt.seconds = atof(value);
        else if (strcmp(flag, "--keys") == 0) opt.keys = atoi(value);
        else if (strcmp(flag, "--set-pct") == 0) opt.set_pct = atoi(value);
        else if (strcmp(flag, "--value-bytes") == 0) opt.value_bytes = atoi(value);
        else if (strcmp(flag, "--think-us") == 0) opt.think_us = atoi(value);
        else { fprintf(stderr, "mcload: unknown option %s\n", flag); usage(argv[0]); return 2; }
    }
    if (opt.port <= 0 || opt.port > 65535 || opt.conns < 1 || opt.conns > 256 || opt.seconds <= 0
        || opt.keys < 1 || opt.set_pct < 0 || opt.set_pct > 100 || opt.value_bytes < 1
        || opt.value_bytes > 1 << 20 || opt.think_us < 0) {
        fprintf(stderr, "mcload: an option is out of range\n");
        usage(argv[0]);
        return 2;
    }
    struct worker *workers = calloc((size_t)opt.conns, sizeof *workers);
    if (workers == NULL) {
        fprintf(stderr, "mcload: out of memory for %d connections\n", opt.conns);
        return 1;
    }
    double start = now_s();
    for (int i = 0; i < opt.conns; i++) {
        workers[i] = (struct worker){.index = i, .opt = &opt, .deadline = start + opt.seconds};
        if (pthread_create(&workers[i].thread, NULL, run_worker, &workers[i]) != 0) {
            fprintf(stderr, "mcload: cannot start thread %d\n", i);
            return 1;
        }
    }
    size_t total = 0;
    long sets = 0, misses = 0;
    int failed = 0;
    for (int i = 0; i < opt.conns; i++) {
        pthread_join(workers[i].thread, NULL);
        if (workers[i].error[0]) {
            fprintf(stderr, "mcload: %s\n", workers[i].error);
            failed = 1;
        }
        total += workers[i].n_get;
        sets += workers[i].sets;
        misses += workers[i].misses;
    }
    double elapsed = now_s() - start;
    if (failed || total == 0) {
        if (!failed) fprintf(stderr, "mcload: no GET completed in %.1f s\n", elapsed);
        return 1;
    }
    uint32_t *all = malloc(total * sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "mcload: out of memory for %zu latencies\n", total);
        return 1;
    }
    size_t at = 0;
    for (int i = 0; i < opt.conns; i++) {
        memcpy(all + at, workers[i].get_us, workers[i].n_get * sizeof *all);
        at += workers[i].n_get;
        free(workers[i].get_us);
    }
    qsort(all, total, sizeof *all, by_value);
    size_t p50 = (total - 1) / 2, p99 = (size_t)((double)(total - 1) * 0.99);
    printf("{\"ops_per_s\": %.1f, \"get_p50_us\": %u, \"get_p99_us\": %u, \"gets\": %zu, \"sets\": %ld, "
           "\"misses\": %ld}\n",
           (double)(total + (size_t)sets) / elapsed, all[p50], all[p99], total, sets, misses);
    free(all);
    free(workers);
    return 0;
}
