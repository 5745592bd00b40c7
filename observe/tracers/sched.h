/* sched.h: the record layouts and counters shared by sched.bpf.c (kernel) and sched.c (user).
 *
 * Every record is fixed-size, starts with its kind and CPU, and is 8-byte aligned, so the user
 * side writes it to its kind's file unchanged and Python maps a file as a numpy structured array
 * (observe/records.py holds the same layouts as dtypes; tests/observe/test_records.py checks the
 * sizes against this file). Field meanings follow the kernel's own trace events, so the capture
 * contract (observe/sql/schema_v1.sql) is the same as with the bpftrace backend.
 */
#ifndef THREADWISE_SCHED_H
#define THREADWISE_SCHED_H

#define TW_COMM_LEN 16
#define TW_MAX_RINGS 256

/* Record kinds; also the index of the counter pair in the `counts` map. */
enum tw_kind {
	TW_SWITCH = 1,      /* sched_switch                              -> struct tw_switch */
	TW_WAKING = 2,      /* sched_waking and sched_wakeup_new         -> struct tw_waking */
	TW_MIGRATE = 3,     /* sched_migrate_task                        -> struct tw_migrate */
	TW_NEW = 4,         /* task_newtask                              -> struct tw_task */
	TW_EXIT = 5,        /* sched_process_exit                        -> struct tw_task */
	TW_RENAME = 6,      /* task_rename (comm: old, new_comm: new)    -> struct tw_task */
	TW_SEEN = 7,        /* first switch-out of a task: who it is     -> struct tw_task */
	TW_NR_KINDS = 8,
};

struct tw_switch {                 /* 40 bytes */
	unsigned int kind, cpu;
	unsigned long long ts;         /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	long long prev_state;          /* as the trace event reports it: 0 running, 1 S, 2 D, ..., 0x100 preempted */
	int prev_tid, prev_prio, next_tid, next_prio;
};

/* The context a wakeup ran in (sched_waking runs in the waker's): what woke a thread when no
 * task did. Read from the CPU's preempt_count (include/linux/preempt.h: in_nmi, in_hardirq,
 * in_serving_softirq) where the kernel's BTF has it, else from the interrupt tracepoints. */
enum tw_context {
	TW_CTX_TASK = 0,       /* a task woke it (the idle task included) */
	TW_CTX_SOFTIRQ = 1,    /* serving a softirq (network receive, timer wheel, ...) */
	TW_CTX_HARDIRQ = 2,    /* a hard interrupt (device, hrtimer expiry) */
	TW_CTX_NMI = 3,
};

struct tw_waking {                 /* 40 bytes */
	unsigned int kind, cpu;
	unsigned long long ts;
	int waker_tid;                 /* 0: an interrupt or the idle task woke it */
	int wakee_tid, target_cpu, is_new;
	int current_tid;               /* the task on the CPU: the waker, or the one an interrupt ran on */
	int context;                   /* enum tw_context */
};

struct tw_migrate {                /* 32 bytes */
	unsigned int kind, cpu;
	unsigned long long ts;
	int tid, orig_cpu, dest_cpu, pad;
};

struct tw_task {                   /* 72 bytes */
	unsigned int kind, cpu;
	unsigned long long ts;
	int tid, tgid, parent_tid, parent_tgid;   /* parent_*: the creator (TW_NEW only) */
	unsigned long long clone_flags;           /* TW_NEW only */
	char comm[TW_COMM_LEN];                   /* TW_RENAME: the old name */
	char new_comm[TW_COMM_LEN];               /* TW_RENAME only */
};

/* Per CPU and kind: events the probes saw while tracing, and those the ring had no room for. */
struct tw_count {
	unsigned long long seen, dropped;
};

#endif /* THREADWISE_SCHED_H */
