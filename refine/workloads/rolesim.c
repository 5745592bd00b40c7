/*
 * rolesim: a workload with known thread roles, the ground truth for threadwise.
 *
 *   hot-N      CPU-bound spinners (role: compute); they count fixed-size compute
 *              chunks (CHUNK_ITERS multiply-adds each) and otherwise never block
 *   feeder     produces an item every --period-us and wakes a worker (wake chain head)
 *   worker-N   wait on a queue, do --work-us of work per item (latency, chain members)
 *   housekeep  wakes every 100 ms, does ~200 us of work (housekeeping)
 *
 * Names are set with pthread_setname_np, so the kernel comm is what the
 * threads are called. Runs for --duration seconds (default: until SIGTERM/SIGINT).
 *
 * --report-ms MS: the main thread (comm "rolesim"; no extra thread, so the
 * set of named threads is unchanged) prints, every MS milliseconds, one JSON
 * object per line on stdout, flushed:
 *   {"ts": <unix s>, "interval_s": <measured>, "hot_chunks_per_s": <all hot
 *    threads together>, "items_per_s": <items workers started>,
 *    "worker_lat_p50_us": ..., "worker_lat_p99_us": ...}
 * Worker latency is queue-to-start: from the feeder enqueuing an item to a
 * worker taking it off the queue (null when no item started in the interval;
 * at most LAT_CAP samples per interval are kept). Once every thread has named
 * itself, "rolesim: ready" is printed on stderr. Without --report-ms nothing
 * of this is printed (the output is as before).
 *
 * --nap N: hot threads sleep 1 us every N chunks (default 0: never). scx_layered
 * re-matches a thread that renamed itself only when the thread next becomes
 * runnable; a hot thread that never blocks keeps the layer it was matched to
 * at fork (under its parent's name). A nap makes it runnable again, so a
 * profile attached after start can take hold of it. Default off: tests rely
 * on hot-N being pure compute.
 *
 * Usage: rolesim [--hot N] [--workers N] [--period-us US] [--work-us US] [--duration S]
 *                [--report-ms MS] [--nap N]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_CAP 1024
#define LAT_CAP 16384
#define MAX_HOT 64
#define CHUNK_ITERS 100000

static atomic_int stop_flag;
static atomic_int named;		/* threads that have set their name */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
/* A ring of enqueue times (ns), protected by queue_lock. */
static unsigned long long queue_ts[QUEUE_CAP];
static unsigned long queue_head, queue_len;
/* Queue-to-start latencies (ns) of the current report interval, under queue_lock. */
static unsigned long long lat_ns[LAT_CAP];
static unsigned long lat_n, items_started;
static long work_us = 100;
static long period_us = 2000;
static long nap_chunks;

/* One counter per hot thread, each on its own cache line (single writer). */
static struct hot_slot {
	atomic_ulong chunks;
} __attribute__((aligned(64))) hot_slots[MAX_HOT];

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Burn CPU for about `us` microseconds of wall time. */
static void busy_for(long us)
{
	unsigned long long end = now_ns() + (unsigned long long)us * 1000ull;
	volatile unsigned long x = 0;
	while (now_ns() < end)
		for (int i = 0; i < 200; i++)
			x += (unsigned long)i * 2654435761u;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR && !atomic_load(&stop_flag))
		;
}

static void set_name(const char *name)
{
	pthread_setname_np(pthread_self(), name);
	atomic_fetch_add(&named, 1);
}

static void *hot_main(void *arg)
{
	long idx = (long)arg;
	char name[16];
	snprintf(name, sizeof(name), "hot-%ld", idx);
	set_name(name);
	atomic_ulong *chunks = &hot_slots[idx].chunks;
	unsigned long done = 0;
	volatile unsigned long x = 1;
	while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
		for (int i = 0; i < CHUNK_ITERS; i++)
			x = x * 6364136223846793005ul + 1442695040888963407ul;
		atomic_store_explicit(chunks, ++done, memory_order_relaxed);
		if (nap_chunks > 0 && done % nap_chunks == 0)
			sleep_us(1);
	}
	return NULL;
}

static void *feeder_main(void *arg)
{
	(void)arg;
	set_name("feeder");
	while (!atomic_load(&stop_flag)) {
		busy_for(20);
		pthread_mutex_lock(&queue_lock);
		if (queue_len < QUEUE_CAP) {
			queue_ts[(queue_head + queue_len) % QUEUE_CAP] = now_ns();
			queue_len++;
		}
		pthread_cond_signal(&queue_cond);
		pthread_mutex_unlock(&queue_lock);
		sleep_us(period_us);
	}
	pthread_mutex_lock(&queue_lock);
	pthread_cond_broadcast(&queue_cond);
	pthread_mutex_unlock(&queue_lock);
	return NULL;
}

static void *worker_main(void *arg)
{
	char name[16];
	snprintf(name, sizeof(name), "worker-%ld", (long)arg);
	set_name(name);
	for (;;) {
		pthread_mutex_lock(&queue_lock);
		while (queue_len == 0 && !atomic_load(&stop_flag))
			pthread_cond_wait(&queue_cond, &queue_lock);
		if (atomic_load(&stop_flag)) {
			pthread_mutex_unlock(&queue_lock);
			return NULL;
		}
		unsigned long long enqueued = queue_ts[queue_head];
		queue_head = (queue_head + 1) % QUEUE_CAP;
		queue_len--;
		if (lat_n < LAT_CAP)
			lat_ns[lat_n++] = now_ns() - enqueued;
		items_started++;
		pthread_mutex_unlock(&queue_lock);
		busy_for(work_us);
	}
}

static void *housekeep_main(void *arg)
{
	(void)arg;
	set_name("housekeep");
	while (!atomic_load(&stop_flag)) {
		busy_for(200);
		sleep_us(100000);
	}
	return NULL;
}

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stop_flag, 1);
}

static long arg_long(const char *flag, const char *value)
{
	char *end;
	long v = strtol(value ? value : "", &end, 10);
	if (!value || *end || v < 0) {
		fprintf(stderr, "rolesim: %s needs a non-negative integer\n", flag);
		exit(2);
	}
	return v;
}

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a;
	unsigned long long y = *(const unsigned long long *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values, printed in us (or null). */
static void print_pct(const char *key, const unsigned long long *sorted, unsigned long n, int pct)
{
	if (n == 0) {
		printf(", \"%s\": null", key);
		return;
	}
	unsigned long rank = (n * pct + 99) / 100;
	printf(", \"%s\": %.1f", key, sorted[rank ? rank - 1 : 0] / 1000.0);
}

/* One report line for the interval since *last_ns; *last_chunks is updated. */
static void report(long hot, unsigned long long *last_ns, unsigned long *last_chunks)
{
	static unsigned long long lat[LAT_CAP];
	unsigned long n, started, chunks = 0;

	pthread_mutex_lock(&queue_lock);
	n = lat_n;
	memcpy(lat, lat_ns, n * sizeof(lat[0]));
	started = items_started;
	lat_n = 0;
	items_started = 0;
	pthread_mutex_unlock(&queue_lock);
	for (long i = 0; i < hot; i++)
		chunks += atomic_load_explicit(&hot_slots[i].chunks, memory_order_relaxed);

	unsigned long long now = now_ns();
	double interval = (now - *last_ns) / 1e9;
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	qsort(lat, n, sizeof(lat[0]), cmp_ull);
	printf("{\"ts\": %.3f, \"interval_s\": %.3f, \"hot_chunks_per_s\": %.1f, "
	       "\"items_per_s\": %.1f",
	       wall.tv_sec + wall.tv_nsec / 1e9, interval,
	       (chunks - *last_chunks) / interval, started / interval);
	print_pct("worker_lat_p50_us", lat, n, 50);
	print_pct("worker_lat_p99_us", lat, n, 99);
	printf("}\n");
	fflush(stdout);
	*last_ns = now;
	*last_chunks = chunks;
}

/* Sleep until the monotonic time `ns`; returns early when stopped. */
static void sleep_until(unsigned long long ns)
{
	struct timespec ts = { ns / 1000000000ull, ns % 1000000000ull };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR &&
	       !atomic_load(&stop_flag))
		;
}

/* The main thread's loop with --report-ms: wait until ready, then report. */
static void run_reporter(long report_ms, long duration, long hot, int nthreads)
{
	while (atomic_load(&named) < nthreads && !atomic_load(&stop_flag))
		sleep_us(1000);
	fprintf(stderr, "rolesim: ready\n");
	fflush(stderr);

	unsigned long long start = now_ns(), last = start, next = start;
	unsigned long long end = duration > 0 ? start + duration * 1000000000ull : 0;
	unsigned long last_chunks = 0;
	for (long i = 0; i < hot; i++)
		last_chunks += atomic_load(&hot_slots[i].chunks);
	unsigned long long period = (unsigned long long)report_ms * 1000000ull;
	while (!atomic_load(&stop_flag)) {
		/* A reporter starved past its deadline reports once for all the time since its last
		 * line, then skips the deadlines it missed: the next line comes at least half a period
		 * later. Keeping every deadline printed a near-empty interval right after a late one
		 * (interval_s 0.000 and rates of ~0 for it, seen under load), which a window's
		 * median then counted like any other line. */
		unsigned long long now = now_ns();
		next += period;
		while (next < now + period / 2)
			next += period;
		if (end && next > end) {
			sleep_until(end);
			break;
		}
		sleep_until(next);
		if (atomic_load(&stop_flag))
			break;
		report(hot, &last, &last_chunks);
	}
	atomic_store(&stop_flag, 1);
}

int main(int argc, char **argv)
{
	long hot = 2, workers = 3, duration = 0, report_ms = 0;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--hot")) hot = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--workers")) workers = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--period-us")) period_us = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--work-us")) work_us = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--duration")) duration = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--report-ms")) report_ms = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--nap")) nap_chunks = arg_long(argv[i], v), i++;
		else {
			fprintf(stderr, "usage: rolesim [--hot N] [--workers N] [--period-us US] "
					"[--work-us US] [--duration S] [--report-ms MS] [--nap N]\n");
			return 2;
		}
	}
	if (hot > MAX_HOT || workers > 64 || workers < 1 || period_us < 1) {
		fprintf(stderr, "rolesim: need 0..64 hot, 1..64 workers, period >= 1 us\n");
		return 2;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	pthread_t threads[130];
	int n = 0;
	for (long i = 0; i < hot; i++)
		pthread_create(&threads[n++], NULL, hot_main, (void *)i);
	for (long i = 0; i < workers; i++)
		pthread_create(&threads[n++], NULL, worker_main, (void *)i);
	pthread_create(&threads[n++], NULL, feeder_main, NULL);
	pthread_create(&threads[n++], NULL, housekeep_main, NULL);

	if (report_ms > 0) {
		run_reporter(report_ms, duration, hot, n);
	} else if (duration > 0) {
		sleep_us(duration * 1000000L);
		atomic_store(&stop_flag, 1);
	} else {
		while (!atomic_load(&stop_flag))
			pause();
	}
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
