/*
 * spin: the ladder's background load, N named CPU spinners ("tw-spin-I").
 *
 * Usage: spin N [--duty PERCENT --period-ms MS]
 *
 * Without --duty each thread burns CPU until SIGTERM. With --duty P each
 * thread is busy P% of every period and sleeps the rest: the spiky,
 * duty-cycled neighbour of the noisy-neighbour seed. The threads name
 * themselves and then sleep once, so that a sched_ext scheduler attached
 * before they were created re-matches them under their own names (scx_layered
 * re-matches a renamed thread only when it next becomes runnable).
 * The process name stays "spin"; the ladder measures the whole process's CPU
 * time from /proc/PID/stat to prove the background really ran.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long duty_pct = 100;
static long period_ms = 100;

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void *spin_main(void *arg)
{
	char name[16];
	volatile unsigned long x = 0;

	snprintf(name, sizeof(name), "tw-spin-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	usleep(1000);
	for (;;) {
		if (duty_pct >= 100) {
			for (int i = 0; i < 1000000; i++)
				x += (unsigned long)i;
			continue;
		}
		unsigned long long period = (unsigned long long)period_ms * 1000000ull;
		unsigned long long busy_until = now_ns() + period * duty_pct / 100;
		while (now_ns() < busy_until)
			for (int i = 0; i < 1000; i++)
				x += (unsigned long)i;
		usleep((useconds_t)(period * (100 - duty_pct) / 100 / 1000));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long n;
	pthread_t thread;

	if (argc < 2 || (n = atol(argv[1])) < 0 || n > 256) {
		fprintf(stderr, "usage: spin N [--duty PERCENT --period-ms MS]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--duty"))
			duty_pct = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--period-ms"))
			period_ms = atol(argv[i + 1]);
	}
	if (duty_pct < 1 || duty_pct > 100 || period_ms < 1) {
		fprintf(stderr, "spin: --duty is 1..100, --period-ms >= 1\n");
		return 2;
	}
	for (long i = 0; i < n; i++)
		if (pthread_create(&thread, NULL, spin_main, (void *)i)) {
			perror("spin: pthread_create");
			return 1;
		}
	for (;;)
		pause();
}
