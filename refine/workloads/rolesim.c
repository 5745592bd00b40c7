/*
 * rolesim: a workload with known thread roles, the ground truth for threadwise.
 *
 *   hot-N      CPU-bound spinners (role: compute)
 *   feeder     produces an item every --period-us and wakes a worker (wake chain head)
 *   worker-N   wait on a queue, do --work-us of work per item (latency, chain members)
 *   housekeep  wakes every 100 ms, does ~200 us of work (housekeeping)
 *
 * Names are set with pthread_setname_np, so the kernel comm is what the
 * threads are called. Runs for --duration seconds (default: until SIGTERM/SIGINT).
 *
 * Usage: rolesim [--hot N] [--workers N] [--period-us US] [--work-us US] [--duration S]
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

static atomic_int stop_flag;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static unsigned long queue_len;
static long work_us = 100;
static long period_us = 2000;

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

static void *hot_main(void *arg)
{
	char name[16];
	snprintf(name, sizeof(name), "hot-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	volatile unsigned long x = 1;
	while (!atomic_load_explicit(&stop_flag, memory_order_relaxed))
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005ul + 1442695040888963407ul;
	return NULL;
}

static void *feeder_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "feeder");
	while (!atomic_load(&stop_flag)) {
		busy_for(20);
		pthread_mutex_lock(&queue_lock);
		if (queue_len < QUEUE_CAP)
			queue_len++;
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
	pthread_setname_np(pthread_self(), name);
	for (;;) {
		pthread_mutex_lock(&queue_lock);
		while (queue_len == 0 && !atomic_load(&stop_flag))
			pthread_cond_wait(&queue_cond, &queue_lock);
		if (atomic_load(&stop_flag)) {
			pthread_mutex_unlock(&queue_lock);
			return NULL;
		}
		queue_len--;
		pthread_mutex_unlock(&queue_lock);
		busy_for(work_us);
	}
}

static void *housekeep_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "housekeep");
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

int main(int argc, char **argv)
{
	long hot = 2, workers = 3, duration = 0;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--hot")) hot = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--workers")) workers = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--period-us")) period_us = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--work-us")) work_us = arg_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--duration")) duration = arg_long(argv[i], v), i++;
		else {
			fprintf(stderr, "usage: rolesim [--hot N] [--workers N] [--period-us US] "
					"[--work-us US] [--duration S]\n");
			return 2;
		}
	}
	if (hot > 64 || workers > 64 || workers < 1 || period_us < 1) {
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

	if (duration > 0) {
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
