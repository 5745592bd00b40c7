// SPDX-License-Identifier: GPL-2.0
/* sched.c: threadwise's scheduler tracer, user side (libbpf), laid out like bcc's libbpf-tools.
 *
 * Usage: threadwise-sched --out DIR [--rings N] [--ring-kb KB] [--wakeup-kb KB] [--poll-ms MS]
 *
 * Problem: move millions of records per second from the kernel's ring buffers to Python without
 * text, without waking per event, and stop so that the kernel's counters and the files cover the
 * same window.
 * Approach: load sched.bpf.c with its options fixed (`const volatile`), create the rings (one
 * shared, or one per CPU: --rings), drain them with libbpf's epoll-based ring_buffer__poll every
 * --poll-ms (or sooner when a ring is half full), and append each record unchanged to its kind's
 * file in DIR (switch.bin, waking.bin, migrate.bin, task.bin). Python maps those files as numpy
 * structured arrays (observe/records.py). A record is written whole or, if the process dies
 * mid-write, leaves a truncated tail that the reader ignores.
 *
 * Control, one line each on stdout:  "live TS RINGS RING_BYTES" once attached;
 * on SIGINT/SIGTERM: set `stopped` in the BPF program, drain every ring, then "end TS" and
 * "counts {json}" (per kind: seen, dropped, dropped per CPU; records written), exit 0.
 * It exits at once with its parent (PR_SET_PDEATHSIG), which releases every BPF link.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "sched.h"
#include "sched.skel.h"

static volatile sig_atomic_t stop_requested;

static const char *const kind_names[TW_NR_KINDS] = {
	[TW_SWITCH] = "switch", [TW_WAKING] = "waking", [TW_MIGRATE] = "migrate",
	[TW_NEW] = "new", [TW_EXIT] = "exit", [TW_RENAME] = "rename", [TW_SEEN] = "seen",
};

/* One output file per record layout; task.bin holds TW_NEW, TW_EXIT, TW_RENAME and TW_SEEN. */
enum { OUT_SWITCH, OUT_WAKING, OUT_MIGRATE, OUT_TASK, NR_OUT };
static const char *const out_names[NR_OUT] = { "switch.bin", "waking.bin", "migrate.bin", "task.bin" };

#define OUT_BUF (1 << 20)

struct out {
	int fd;
	size_t used;
	unsigned long long records;
	char buf[OUT_BUF];
};

static struct out outs[NR_OUT];
static unsigned long long bad_records;
static int write_error;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void flush_out(struct out *o)
{
	size_t done = 0;

	while (done < o->used) {
		ssize_t n = write(o->fd, o->buf + done, o->used - done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (!write_error)
				fprintf(stderr, "threadwise-sched: write: %s\n", strerror(errno));
			write_error = 1;
			break;
		}
		done += n;
	}
	o->used = 0;
}

static void flush_all(void)
{
	for (int i = 0; i < NR_OUT; i++)
		flush_out(&outs[i]);
}

static int on_record(void *ctx, void *data, size_t size)
{
	unsigned int kind = *(unsigned int *)data;
	int which;
	size_t want;
	struct out *o;

	(void)ctx;
	switch (kind) {
	case TW_SWITCH: which = OUT_SWITCH; want = sizeof(struct tw_switch); break;
	case TW_WAKING: which = OUT_WAKING; want = sizeof(struct tw_waking); break;
	case TW_MIGRATE: which = OUT_MIGRATE; want = sizeof(struct tw_migrate); break;
	case TW_NEW: case TW_EXIT: case TW_RENAME: case TW_SEEN:
		which = OUT_TASK; want = sizeof(struct tw_task); break;
	default: bad_records++; return 0;
	}
	if (size < want) {
		bad_records++;
		return 0;
	}
	o = &outs[which];
	if (o->used + want > OUT_BUF)
		flush_out(o);
	memcpy(o->buf + o->used, data, want);
	o->used += want;
	o->records++;
	return 0;
}

/* Does the sched_switch tracepoint pass prev_state (kernel 5.18+)? Its btf_trace typedef says. */
static bool switch_passes_state(void)
{
	struct btf *btf = btf__load_vmlinux_btf();
	const struct btf_type *t;
	bool has = true;
	int id;

	if (!btf)
		return true;
	id = btf__find_by_name_kind(btf, "btf_trace_sched_switch", BTF_KIND_TYPEDEF);
	if (id > 0) {
		t = btf__type_by_id(btf, btf__type_by_id(btf, id)->type);   /* pointer */
		if (t && btf_is_ptr(t)) {
			t = btf__type_by_id(btf, t->type);                    /* func proto */
			if (t && btf_is_func_proto(t))
				has = btf_vlen(t) >= 5;   /* void *, preempt, prev, next, prev_state */
		}
	}
	btf__free(btf);
	return has;
}

static void print_counts(struct sched_bpf *skel, int ncpus)
{
	struct tw_count *values = calloc(ncpus, sizeof(*values));
	int fd = bpf_map__fd(skel->maps.counts);

	printf("counts {");
	for (unsigned int kind = 1; kind < TW_NR_KINDS; kind++) {
		unsigned long long seen = 0, dropped = 0;

		if (values && bpf_map_lookup_elem(fd, &kind, values) == 0)
			for (int c = 0; c < ncpus; c++) {
				seen += values[c].seen;
				dropped += values[c].dropped;
			}
		printf("%s\"%s\": {\"seen\": %llu, \"dropped\": %llu, \"dropped_per_cpu\": [",
		       kind == 1 ? "" : ", ", kind_names[kind], seen, dropped);
		for (int c = 0; c < ncpus; c++)
			printf("%s%llu", c ? ", " : "", values ? values[c].dropped : 0);
		printf("]}");
	}
	printf(", \"written\": {");
	for (int i = 0; i < NR_OUT; i++)
		printf("%s\"%s\": %llu", i ? ", " : "", out_names[i], outs[i].records);
	/* events a program never saw because it was already running on that CPU (the kernel's
	 * recursion guard, e.g. a wakeup from an interrupt during another wakeup's program) */
	printf("}, \"missed\": {");
	struct bpf_program *prog;
	int first = 1;
	bpf_object__for_each_program(prog, skel->obj) {
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0) {
			printf("%s\"%s\": %llu", first ? "" : ", ", bpf_program__name(prog),
			       (unsigned long long)info.recursion_misses);
			first = 0;
		}
	}
	printf("}, \"bad_records\": %llu}\n", bad_records);
	free(values);
}

static int usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s --out DIR [--rings N] [--ring-kb KB] [--wakeup-kb KB] [--poll-ms MS]\n"
		"  --rings N      ring buffers; CPU c writes to ring c %% N (0: one per CPU; default 0)\n"
		"  --ring-kb KB   size of each ring, a power of two >= 4 (default 4096)\n"
		"  --wakeup-kb KB wake the reader when a ring holds this much (default: half a ring)\n"
		"  --poll-ms MS   otherwise drain every MS milliseconds (default 100)\n", argv0);
	return 2;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, 'o' }, { "rings", required_argument, NULL, 'r' },
		{ "ring-kb", required_argument, NULL, 's' }, { "wakeup-kb", required_argument, NULL, 'w' },
		{ "poll-ms", required_argument, NULL, 'p' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	const char *out_dir = NULL;
	long rings = 0, ring_kb = 4096, wakeup_kb = -1, poll_ms = 100;
	pid_t parent = getppid();
	struct sched_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	int ncpus, opt, err = 1;
	int ring_fds[TW_MAX_RINGS];
	unsigned long long ring_bytes;

	while ((opt = getopt_long(argc, argv, "o:r:s:w:p:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o': out_dir = optarg; break;
		case 'r': rings = strtol(optarg, NULL, 10); break;
		case 's': ring_kb = strtol(optarg, NULL, 10); break;
		case 'w': wakeup_kb = strtol(optarg, NULL, 10); break;
		case 'p': poll_ms = strtol(optarg, NULL, 10); break;
		default: return usage(argv[0]);
		}
	}
	if (!out_dir || rings < 0 || ring_kb < 4 || (ring_kb & (ring_kb - 1)) || poll_ms < 1)
		return usage(argv[0]);
	/* die with the observer: the kernel then releases the links and nothing traces for nobody */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		return 1;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (int i = 0; i < TW_MAX_RINGS; i++)
		ring_fds[i] = -1;
	setrlimit(RLIMIT_MEMLOCK, &(struct rlimit){ RLIM_INFINITY, RLIM_INFINITY });

	ncpus = libbpf_num_possible_cpus();
	if (ncpus <= 0) {
		fprintf(stderr, "threadwise-sched: cannot count CPUs: %s\n", strerror(-ncpus));
		return 1;
	}
	if (rings == 0 || rings > ncpus)
		rings = ncpus;
	if (rings > TW_MAX_RINGS)
		rings = TW_MAX_RINGS;
	ring_bytes = (unsigned long long)ring_kb * 1024;
	if (wakeup_kb < 0)
		wakeup_kb = ring_kb / 2;

	for (int i = 0; i < NR_OUT; i++) {
		char path[4096];

		snprintf(path, sizeof(path), "%s/%s", out_dir, out_names[i]);
		outs[i].fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (outs[i].fd < 0) {
			fprintf(stderr, "threadwise-sched: %s: %s\n", path, strerror(errno));
			return 1;
		}
	}

	skel = sched_bpf__open();
	if (!skel) {
		fprintf(stderr, "threadwise-sched: cannot open the BPF object: %s\n", strerror(errno));
		return 1;
	}
	skel->rodata->nr_rings = rings;
	skel->rodata->wakeup_bytes = (unsigned long long)wakeup_kb * 1024;
	skel->rodata->switch_has_state_arg = switch_passes_state();
	/* the rings are created here, sized at run time; the first is also the outer map's template
	 * (libbpf 1.1 cannot resize a declared inner map) */
	for (int i = 0; i < rings; i++) {
		ring_fds[i] = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "tw_ring", 0, 0, ring_bytes, NULL);
		if (ring_fds[i] < 0) {
			fprintf(stderr, "threadwise-sched: ring %d of %llu bytes: %s\n", i, ring_bytes,
				strerror(errno));
			goto out;
		}
	}
	if ((err = bpf_map__set_inner_map_fd(skel->maps.rings, ring_fds[0]))) {
		fprintf(stderr, "threadwise-sched: ring template: %s\n", strerror(-err));
		goto out;
	}
	if ((err = sched_bpf__load(skel))) {
		fprintf(stderr, "threadwise-sched: loading the BPF programs failed: %s\n", strerror(-err));
		goto out;
	}
	for (int i = 0; i < rings; i++) {
		if (bpf_map_update_elem(bpf_map__fd(skel->maps.rings), &i, &ring_fds[i], BPF_ANY)) {
			fprintf(stderr, "threadwise-sched: installing ring %d: %s\n", i, strerror(errno));
			err = 1;
			goto out;
		}
		if (i == 0)
			rb = ring_buffer__new(ring_fds[i], on_record, NULL, NULL);
		else if (rb && ring_buffer__add(rb, ring_fds[i], on_record, NULL))
			rb = NULL;
		if (!rb) {
			fprintf(stderr, "threadwise-sched: ring buffer reader: %s\n", strerror(errno));
			err = 1;
			goto out;
		}
	}
	if ((err = sched_bpf__attach(skel))) {
		fprintf(stderr, "threadwise-sched: attaching failed: %s\n", strerror(-err));
		goto out;
	}
	printf("live %llu %ld %llu\n", now_ns(), rings, ring_bytes);
	fflush(stdout);

	while (!stop_requested) {
		int n = ring_buffer__poll(rb, poll_ms);

		if (n < 0 && n != -EINTR) {
			fprintf(stderr, "threadwise-sched: polling the rings: %s\n", strerror(-n));
			break;
		}
		/* records submitted without a wakeup are not signalled to epoll: drain every ring on
		 * each tick, so the files trail the kernel by at most --poll-ms */
		ring_buffer__consume(rb);
		flush_all();
	}
	skel->bss->stopped = true;
	printf("end %llu\n", now_ns());
	/* every record reserved before the flag was seen is committed within microseconds */
	usleep(10000);
	while (ring_buffer__consume(rb) > 0)
		;
	flush_all();
	print_counts(skel, ncpus);
	fflush(stdout);
	err = write_error;
out:
	ring_buffer__free(rb);
	sched_bpf__destroy(skel);
	for (int i = 0; i < NR_OUT; i++)
		if (outs[i].fd > 0)
			close(outs[i].fd);
	for (int i = 0; i < rings; i++)
		if (ring_fds[i] >= 0)
			close(ring_fds[i]);
	return err ? 1 : 0;
}
