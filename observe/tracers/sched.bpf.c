// SPDX-License-Identifier: GPL-2.0
/* sched.bpf.c: threadwise's scheduler tracer, kernel side (CO-RE, tp_btf).
 *
 * Problem: record every context switch, wakeup, migration and task life event of a busy machine
 * at the cost of the kernel's own `perf sched record` (about 2% on hackbench here), lose nothing
 * without counting it exactly, and never wake the reader per event (every wakeup of the reader is
 * itself a traced switch).
 * Approach: one tp_btf program per event writes a fixed-size binary record (sched.h) into a BPF
 * ring buffer chosen by CPU from an array of rings (one shared ring, or one per CPU: the user
 * side decides, sched.c). A record that finds no room is counted as dropped, per CPU and kind, in
 * a per-CPU array next to the count of records seen; nothing else is ever lost silently. The
 * reader is woken only when a ring holds `wakeup_bytes` or more; otherwise it polls on a timer.
 * The user side stops a capture by setting `stopped`: from then on nothing is counted or written,
 * so counters and stream cover the same window.
 * Each wakeup also records the context it ran in (task, softirq, hard interrupt, NMI) and the task
 * on the CPU, so a thread woken from the network shows what woke it (wake_context below).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sched.h"

char LICENSE[] SEC("license") = "GPL";

/* Options, fixed before load by sched.c. */
const volatile unsigned int nr_rings = 1;          /* ring index = cpu % nr_rings */
const volatile unsigned long long wakeup_bytes = 1 << 20;
const volatile bool switch_has_state_arg = true;  /* sched_switch passes prev_state (5.18+) */

/* Set by the user side to end the capture. */
volatile bool stopped;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, TW_MAX_RINGS);
	__type(key, u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_RINGBUF);
		__uint(max_entries, 1 << 22);      /* sized by sched.c before load */
	});
} rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TW_NR_KINDS);
	__type(key, u32);
	__type(value, struct tw_count);
} counts SEC(".maps");

/* Interrupt nesting per CPU, from the interrupt tracepoints (wake_context). */
#define TW_HRTIMER_SOFTIRQ 8   /* include/linux/interrupt.h: the softirq that runs "soft" hrtimers */

struct irq_nest {
	u32 hard;    /* irq_handler_entry: a device interrupt */
	u32 soft;    /* softirq_entry (softirqs do not nest on a CPU) */
	u32 vec;     /* the softirq's vector */
	u32 timer;   /* hrtimer_expire_entry: in the timer interrupt, or in HRTIMER_SOFTIRQ */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct irq_nest);
} irq_nest SEC(".maps");

/* Tasks already described by a TW_SEEN record: task-local storage, one lookup in the task itself
 * per switch (a hash map lookup cost more) and freed with the task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, u8);
} seen SEC(".maps");

/* Kernel task-state bits (include/linux/sched.h); stable since 5.14. */
#define TASK_REPORT 0x7f
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_NOLOAD 0x400
#define TASK_IDLE (TASK_UNINTERRUPTIBLE | TASK_NOLOAD)
#define TASK_RTLOCK_WAIT 0x1000
#define TASK_REPORT_IDLE (TASK_REPORT + 1)
#define TASK_REPORT_MAX (TASK_REPORT_IDLE << 1)

/* The kernel's __trace_sched_switch_state: what the sched_switch trace event reports. */
static __always_inline long long report_state(bool preempt, unsigned int state, struct task_struct *p)
{
	unsigned int s;

	if (preempt)
		return TASK_REPORT_MAX;
	s = (state | p->exit_state) & TASK_REPORT;
	if ((state & TASK_IDLE) == TASK_IDLE)
		s = TASK_REPORT_IDLE;
	if (state & TASK_RTLOCK_WAIT)
		s = TASK_UNINTERRUPTIBLE;
	/* 1 << (fls(s) - 1): the highest bit (s < 0x100) */
	for (int bit = 7; bit >= 0; bit--)
		if (s & (1u << bit))
			return 1u << bit;
	return 0;
}

struct task_struct___pre516 {
	int cpu;
} __attribute__((preserve_access_index));

static __always_inline int task_cpu(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return BPF_CORE_READ(p, thread_info.cpu);
	return BPF_CORE_READ((struct task_struct___pre516 *)p, cpu);
}

/* The context of the code running now: in sched_waking, the waker's. From the interrupt
 * tracepoints' nesting counts: a device interrupt is innermost when one is open (a softirq never
 * runs inside one: irq_exit runs it after the handler's exit tracepoint); an hrtimer callback is a
 * hard interrupt's (the timer interrupt has no tracepoint of irq/) unless it runs in the hrtimer
 * softirq (HRTIMER_SOFTIRQ, whose callbacks are the "soft" hrtimers); then a softirq. Interrupts
 * that announce none of these (IPIs such as irq_work) read as task context. sched_stream.bt
 * (bpftrace) applies the same rule to the same tracepoints: x86's irq_vectors tracepoints, which
 * would name the timer interrupt, refuse perf's sampling events, the kind bpftrace attaches with
 * ("perf_event_open(.../irq_vectors/irq_work_exit/id): Operation not permitted").
 * Not the preempt count, which would be exact (include/linux/preempt.h; bpf_experimental.h's
 * get_preempt_count reads x86's per-CPU __preempt_count as a typed ksym): the verifier resolves a
 * ksym's address through kallsyms, which lists per-CPU variables only with CONFIG_KALLSYMS_ALL,
 * and this host's 6.18 kernel has it off ("ldimm64 failed to find the address for kernel symbol
 * '__preempt_count'"). */
static __always_inline int wake_context(void)
{
	u32 zero = 0;
	struct irq_nest *nest = bpf_map_lookup_elem(&irq_nest, &zero);

	if (!nest)
		return TW_CTX_TASK;
	if (nest->hard)
		return TW_CTX_HARDIRQ;
	if (nest->timer && !(nest->soft && nest->vec == TW_HRTIMER_SOFTIRQ))
		return TW_CTX_HARDIRQ;
	return nest->soft ? TW_CTX_SOFTIRQ : TW_CTX_TASK;
}

static __always_inline struct tw_count *counter(u32 kind)
{
	return bpf_map_lookup_elem(&counts, &kind);
}

/* A ring slot for one record of `size` bytes, or NULL (counted as dropped). */
static __always_inline void *reserve(u32 kind, u64 size, void **ring)
{
	struct tw_count *count = counter(kind);
	u32 index = bpf_get_smp_processor_id() % nr_rings;
	void *rec = NULL;

	*ring = bpf_map_lookup_elem(&rings, &index);
	if (*ring)
		rec = bpf_ringbuf_reserve(*ring, size, 0);
	if (count) {
		count->seen++;
		if (!rec)
			count->dropped++;
	}
	return rec;
}

static __always_inline void submit(void *rec, void *ring)
{
	u64 flags = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									   : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(rec, flags);
}

static __always_inline void task_record(u32 kind, struct task_struct *p, const char *new_comm)
{
	void *ring;
	struct tw_task *rec = reserve(kind == TW_SEEN ? TW_SEEN : kind, sizeof(*rec), &ring);

	if (!rec)
		return;
	rec->kind = kind;
	rec->cpu = bpf_get_smp_processor_id();
	rec->ts = bpf_ktime_get_ns();
	rec->tid = p->pid;
	rec->tgid = p->tgid;
	rec->parent_tid = 0;
	rec->parent_tgid = 0;
	rec->clone_flags = 0;
	bpf_probe_read_kernel_str(rec->comm, sizeof(rec->comm), p->comm);
	if (new_comm)
		bpf_probe_read_kernel_str(rec->new_comm, sizeof(rec->new_comm), new_comm);
	else
		__builtin_memset(rec->new_comm, 0, sizeof(rec->new_comm));
	submit(rec, ring);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	u32 zero = 0;
	struct irq_nest *nest;
	unsigned int state;
	struct tw_switch *rec;
	void *ring;
	u32 prev_tid = prev->pid;
	u8 *described;

	/* no CPU switches tasks inside an interrupt: nesting left by a missed exit is reset here */
	nest = bpf_map_lookup_elem(&irq_nest, &zero);
	if (nest) {
		nest->hard = 0;
		nest->soft = 0;
		nest->timer = 0;
	}
	if (stopped)
		return 0;
	if (prev_tid) {
		described = bpf_task_storage_get(&seen, prev, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (described && !*described) {
			*described = 1;
			task_record(TW_SEEN, prev, NULL);
		}
	}
	rec = reserve(TW_SWITCH, sizeof(*rec), &ring);
	if (!rec)
		return 0;
	state = switch_has_state_arg ? (unsigned int)ctx[3] : (unsigned int)BPF_CORE_READ(prev, __state);
	rec->kind = TW_SWITCH;
	rec->cpu = bpf_get_smp_processor_id();
	rec->ts = bpf_ktime_get_ns();
	rec->prev_state = report_state(preempt, state, prev);
	rec->prev_tid = prev_tid;
	rec->prev_prio = prev->prio;
	rec->next_tid = next->pid;
	rec->next_prio = next->prio;
	submit(rec, ring);
	return 0;
}

static __always_inline int wake(struct task_struct *p, int is_new)
{
	struct tw_waking *rec;
	void *ring;
	int context;
	u32 current_tid;

	if (stopped)
		return 0;
	rec = reserve(TW_WAKING, sizeof(*rec), &ring);
	if (!rec)
		return 0;
	/* a new task's first wakeup is its creator's, in task context */
	context = is_new ? TW_CTX_TASK : wake_context();
	current_tid = (u32)bpf_get_current_pid_tgid();
	rec->kind = TW_WAKING;
	rec->cpu = bpf_get_smp_processor_id();
	rec->ts = bpf_ktime_get_ns();
	rec->waker_tid = context == TW_CTX_TASK ? current_tid : 0;
	rec->wakee_tid = p->pid;
	rec->target_cpu = task_cpu(p);
	rec->is_new = is_new;
	rec->current_tid = current_tid;
	rec->context = context;
	submit(rec, ring);
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
	return wake(p, 0);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	return wake(p, 1);
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(on_migrate, struct task_struct *p, int dest_cpu)
{
	struct tw_migrate *rec;
	void *ring;

	if (stopped)
		return 0;
	rec = reserve(TW_MIGRATE, sizeof(*rec), &ring);
	if (!rec)
		return 0;
	rec->kind = TW_MIGRATE;
	rec->cpu = bpf_get_smp_processor_id();
	rec->ts = bpf_ktime_get_ns();
	rec->tid = p->pid;
	rec->orig_cpu = task_cpu(p);
	rec->dest_cpu = dest_cpu;
	rec->pad = 0;
	submit(rec, ring);
	return 0;
}

SEC("tp_btf/task_newtask")
int BPF_PROG(on_newtask, struct task_struct *p, unsigned long clone_flags)
{
	struct tw_task *rec;
	void *ring;
	u64 id;

	if (stopped)
		return 0;
	rec = reserve(TW_NEW, sizeof(*rec), &ring);
	if (!rec)
		return 0;
	id = bpf_get_current_pid_tgid();
	rec->kind = TW_NEW;
	rec->cpu = bpf_get_smp_processor_id();
	rec->ts = bpf_ktime_get_ns();
	rec->tid = p->pid;
	rec->tgid = p->tgid;
	rec->parent_tid = (u32)id;
	rec->parent_tgid = id >> 32;
	rec->clone_flags = clone_flags;
	bpf_probe_read_kernel_str(rec->comm, sizeof(rec->comm), p->comm);
	__builtin_memset(rec->new_comm, 0, sizeof(rec->new_comm));
	submit(rec, ring);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_process_exit, struct task_struct *p)
{
	if (stopped)
		return 0;
	task_record(TW_EXIT, p, NULL);
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(on_rename, struct task_struct *p, const char *comm)
{
	if (stopped)
		return 0;
	task_record(TW_RENAME, p, comm);
	return 0;
}

/* The nesting counts wake_context reads. */
static __always_inline struct irq_nest *nesting(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&irq_nest, &zero);
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_irq_entry)
{
	struct irq_nest *n = nesting();

	if (n)
		n->hard++;
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(on_irq_exit)
{
	struct irq_nest *n = nesting();

	if (n && n->hard)
		n->hard--;
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq_entry, unsigned int vec_nr)
{
	struct irq_nest *n = nesting();

	if (n) {
		n->soft++;
		n->vec = vec_nr;
	}
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(on_softirq_exit)
{
	struct irq_nest *n = nesting();

	if (n && n->soft)
		n->soft--;
	return 0;
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(on_hrtimer_entry)
{
	struct irq_nest *n = nesting();

	if (n)
		n->timer++;
	return 0;
}

SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(on_hrtimer_exit)
{
	struct irq_nest *n = nesting();

	if (n && n->timer)
		n->timer--;
	return 0;
}
