-- finalize.sql: derived, Perfetto-shaped tables of a complete capture.
--
-- Problem: raw events carry kernel tids, which are reused, and a switch event
-- only says who left and who entered a CPU. Analysis wants threads with stable
-- ids and intervals (slices, states) like Perfetto's trace processor.
-- Approach: a thread *instance* is a tid between two task_newtask events for
-- that tid (the first instance, born before the capture, starts at -inf).
-- Every event is mapped to its instance with an ASOF join on (tid, ts).
-- Slices are consecutive switches on one CPU; the first slice of each CPU
-- starts at the capture start and the last ends at the capture end (clipped,
-- flagged), so per-thread runtime inside the window is exact.
-- Run once per capture, after the last raw batch; parameters: none (capture
-- window comes from the `capture` table).
-- Derived tables are not physically sorted (sorting 10M+ rows dominated the
-- cost): readers ORDER BY what they need. Measured on 10M synthetic switches:
-- 65.9 s / 4.2 GB peak with the sorts, 20.3 s / 1.6 GB without, with the
-- memory limit below (DuckDB spills to disk beyond it).
-- Issue 10: thread instances are found by hash joins instead of ASOF joins and
-- the per-CPU window carries only what later steps read; the results are the
-- same (tests/observe/test_ingest.py compares every table with the version
-- before, kept in tests/observe/fixtures/finalize_asof.sql). On 10M records
-- of 4 CPUs that took finalize from 17.7 to 11.0 s of CPU (benchmarks/ingest.py).
-- Then, measured per statement on 10M events (2 cores, idle host), where DuckDB's
-- writes of rows cost about the same compressed or not (~0.1 us a row) and a
-- numpy sort of 5M keys took longer than DuckDB's window on two threads:
-- thread_state is stored once per gap (thread_wait, 5.2M rows) behind a view,
-- not as 14.3M rows; end_state is an ENUM (a VARCHAR column cost a third of
-- each write); the window temp tables are inlined. Finalize 5.2 -> 3.7 s.
SET memory_limit = '1500MB';
SET preserve_insertion_order = false;

-- ---------------------------------------------------------------------------
-- Thread instances
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE _tid_first AS
    SELECT tid, MIN(ts) AS first_ts FROM (
        SELECT prev_tid AS tid, ts FROM raw_sched_switch
        UNION ALL SELECT next_tid, ts FROM raw_sched_switch
        UNION ALL SELECT wakee_tid, ts FROM raw_sched_waking
        -- the task on the CPU is the waker in task context (current_tid NULL: not recorded)
        UNION ALL SELECT COALESCE(current_tid, waker_tid), ts FROM raw_sched_waking
        UNION ALL SELECT tid, ts FROM raw_sched_migrate
        UNION ALL SELECT tid, ts FROM raw_task_exit
        UNION ALL SELECT tid, ts FROM raw_task_rename
        UNION ALL SELECT tid, ts FROM raw_task_seen
        UNION ALL SELECT tid, ts FROM proc_snapshot
        UNION ALL SELECT parent_tid, ts FROM raw_task_new
    ) GROUP BY tid;

-- One row per thread instance: every birth, plus an instance "born before the
-- capture" (-inf) for tids with an event before their first birth (or none).
CREATE TEMP TABLE _births AS
    SELECT DISTINCT tid, ts AS born_ts FROM raw_task_new
    UNION ALL
    SELECT f.tid, -9223372036854775807 AS born_ts
    FROM _tid_first f
    LEFT JOIN (SELECT tid, MIN(ts) AS first_birth FROM raw_task_new GROUP BY tid) b USING (tid)
    WHERE b.first_birth IS NULL OR f.first_ts < b.first_birth;

-- tid 0 (the idle tasks of every CPU) gets utid 0, as in Perfetto.
CREATE TEMP TABLE _instance AS
    SELECT
        tid,
        born_ts,
        LEAD(born_ts) OVER (PARTITION BY tid ORDER BY born_ts) AS next_born_ts,
        ROW_NUMBER() OVER (ORDER BY (tid <> 0), born_ts, tid) - 1 AS utid
    FROM _births;

-- Keyed event streams (tid, ts) -> utid: the instance of the tid born last at
-- or before ts, i.e. the one whose [born_ts, next_born_ts) holds ts. Written as
-- an equality hash join on tid with the interval as a residual condition, not
-- an ASOF join: births are few, so almost every tid has one instance and the
-- hash join runs in parallel without sorting the events (the ASOF join sorted
-- every event stream by (tid, ts): 3.6 s of 20 s on 10M switches). Every event
-- maps to exactly one instance: _tid_first covers each tid's first event, so an
-- event before the tid's first birth falls in its "born before" instance, and
-- birth times are distinct per tid (DISTINCT above), so the intervals of a tid
-- tile the time line without overlap.
-- ---------------------------------------------------------------------------
-- sched_slice: who held each CPU, when (Perfetto: sched_slice)
-- ---------------------------------------------------------------------------
-- A switch sequence on one CPU must chain: each switch's prev is the previous
-- switch's next. Where it does not, at least one switch is missing. Seen on
-- these hosts, and in the kernel's own ftrace output too (so not a tracer
-- loss): the switch-out of the machine agent's threads (PID 1's
-- tokio-rt-worker, nice -10) is never emitted by sched_switch. Such gaps are
-- recorded, counted as lost events, and the slice before a gap gets no
-- end_state.
-- The switches of each CPU in time order, with the next switch's fields. Only
-- the columns later steps read are carried through the sort (inline: a temp
-- table of them cost more than it saved), and the tids are mapped to utids
-- afterwards, once per slice (next_tid), not before for both sides of every
-- switch (prev_tid is only needed for each CPU's first switch, found by
-- arg_min without the sort).
CREATE TABLE sched_slice AS
WITH bounds AS (
    SELECT start_ts, end_ts FROM capture
), ordered AS (
    SELECT ts, cpu, next_tid, next_prio,
        LEAD(ts) OVER w AS next_ts,
        LEAD(prev_state) OVER w AS next_prev_state,
        LEAD(prev_tid) OVER w AS next_prev_tid
    FROM raw_sched_switch
    WINDOW w AS (PARTITION BY cpu ORDER BY ts)
), body AS (
    -- A slice of next_tid's instance from this switch to the next switch on the CPU.
    SELECT o.ts, COALESCE(o.next_ts, b.end_ts) - o.ts AS dur, o.cpu, n.utid,
           CASE WHEN o.next_prev_tid <> o.next_tid THEN NULL ELSE o.next_prev_state END AS raw_end_state,
           o.next_prio AS priority,
           o.next_ts IS NULL OR o.next_prev_tid <> o.next_tid AS clipped
    FROM ordered o
    JOIN _instance n ON n.tid = o.next_tid AND o.ts >= n.born_ts
                    AND (n.next_born_ts IS NULL OR o.ts < n.next_born_ts),
    bounds b
), first_switch AS (
    SELECT cpu, min(ts) AS ts, arg_min(prev_tid, ts) AS prev_tid, arg_min(prev_state, ts) AS prev_state,
           arg_min(prev_prio, ts) AS prev_prio
    FROM raw_sched_switch GROUP BY cpu
), head AS (
    -- The thread that held the CPU when tracing started, up to its first switch.
    SELECT b.start_ts AS ts, o.ts - b.start_ts AS dur, o.cpu, p.utid,
           o.prev_state AS raw_end_state, o.prev_prio AS priority, TRUE AS clipped
    FROM first_switch o
    JOIN _instance p ON p.tid = o.prev_tid AND o.ts >= p.born_ts
                    AND (p.next_born_ts IS NULL OR o.ts < p.next_born_ts),
    bounds b
    WHERE o.ts > b.start_ts
)
SELECT ts, dur, cpu, utid,
    -- Perfetto's end_state letters; R+ = preempted (TASK_REPORT_MAX bit, 0x100).
    -- The rule picks a position in a list of ENUM values (a string cast to the
    -- ENUM per row cost 0.1 s of 6M slices).
    (['R+', 'R', 'S', 'D', 'T', 't', 'X', 'Z', 'P', 'I']
        ::ENUM('R+', 'R', 'S', 'D', 'T', 't', 'X', 'Z', 'P', 'I')[])[
        CASE
            WHEN raw_end_state IS NULL THEN NULL
            WHEN raw_end_state & 256 <> 0 THEN 1           -- R+
            WHEN raw_end_state & 127 = 0 AND raw_end_state & 128 = 0 THEN 2   -- R
            WHEN raw_end_state & 1 <> 0 THEN 3             -- S
            WHEN raw_end_state & 2 <> 0 THEN 4             -- D
            WHEN raw_end_state & 4 <> 0 THEN 5             -- T
            WHEN raw_end_state & 8 <> 0 THEN 6             -- t
            WHEN raw_end_state & 16 <> 0 THEN 7            -- X
            WHEN raw_end_state & 32 <> 0 THEN 8            -- Z
            WHEN raw_end_state & 64 <> 0 THEN 9            -- P
            ELSE 10                                        -- I
        END] AS end_state,
    priority, clipped
FROM (SELECT * FROM body UNION ALL SELECT * FROM head)
WHERE dur >= 0
-- (no ORDER BY: a 10M-row sort; readers order what they need)
;

-- A gap is a slice the next switch on its CPU did not close: clipped, no
-- end_state, and a switch at its end (ts + dur) whose prev is someone else.
-- dur > 0 keeps a CPU's last slice out when its switch is the capture's last
-- event (end_ts = that ts: the slice would meet its own switch). Two switches
-- of one CPU at the same nanosecond have no defined order, here or before.
CREATE TABLE switch_gap AS
    SELECT s.cpu,
           s.ts AS before_ts,          -- last switch before the gap
           s.ts + s.dur AS after_ts,   -- first switch after it
           i.tid AS expected_tid,      -- who should have switched out
           r.prev_tid AS found_tid
    FROM sched_slice s
    JOIN _instance i ON i.utid = s.utid
    JOIN raw_sched_switch r ON r.cpu = s.cpu AND r.ts = s.ts + s.dur
    WHERE s.clipped AND s.end_state IS NULL AND s.dur > 0 AND r.prev_tid <> i.tid
    ORDER BY before_ts;

UPDATE capture SET
    switch_gaps = (SELECT count(*) FROM switch_gap),
    events_lost = COALESCE(events_lost, 0) + (SELECT count(*) FROM switch_gap);

-- ---------------------------------------------------------------------------
-- wakeup and migration, keyed by utid
-- ---------------------------------------------------------------------------
-- One join finds the task on the CPU (current_tid, migration 7), which in task context is the
-- waker: waker_utid is it unless an interrupt or the idle task woke the thread (waker_tid 0).
-- context: the raw code as an ENUM (a position in a list, not a string cast per row: see
-- sched_slice); NULL with current_utid where the tracer did not record them.
CREATE TABLE wakeup AS
    SELECT w.ts, w.cpu,
           CASE WHEN w.waker_tid = 0 THEN NULL ELSE a.utid END AS waker_utid,
           b.utid AS wakee_utid, w.target_cpu, w.is_new,
           (['task', 'softirq', 'hardirq', 'nmi']::ENUM('task', 'softirq', 'hardirq', 'nmi')[])[
               w.context + 1] AS context,
           CASE WHEN w.current_tid IS NOT NULL THEN a.utid END AS current_utid
    FROM raw_sched_waking w
    JOIN _instance a ON a.tid = COALESCE(w.current_tid, w.waker_tid) AND w.ts >= a.born_ts
                    AND (a.next_born_ts IS NULL OR w.ts < a.next_born_ts)
    JOIN _instance b ON b.tid = w.wakee_tid AND w.ts >= b.born_ts
                    AND (b.next_born_ts IS NULL OR w.ts < b.next_born_ts)
    ;

CREATE TABLE migration AS
    SELECT m.ts, i.utid, m.orig_cpu, m.dest_cpu
    FROM raw_sched_migrate m
    JOIN _instance i ON i.tid = m.tid AND m.ts >= i.born_ts
                    AND (i.next_born_ts IS NULL OR m.ts < i.next_born_ts)
    ORDER BY m.ts;

-- ---------------------------------------------------------------------------
-- thread_state: Running / R / R+ / S / D ... intervals (Perfetto: thread_state)
-- After a slice ends in a sleep state the thread sleeps until its first waking,
-- then is runnable ('R', with the waker) until its next slice. After a
-- preemption ('R+') it is runnable until its next slice.
-- Stored once per gap between two slices of a thread (thread_wait); the view
-- thread_state unfolds each gap into its one or two intervals and adds the
-- Running intervals from sched_slice. Issue 10: storing thread_state whole
-- wrote every slice twice and each sleep as two rows (14.3M rows for 10M
-- events, 1.6-1.9 s of a 2-core host; DuckDB's write of a row costs about the
-- same compressed or not), so the capture stores 5.2M gaps instead and readers
-- get the same rows (tests/observe/test_ingest.py).
-- ---------------------------------------------------------------------------
-- The first waking at or after the gap's start, if it came before the next
-- slice and the thread was asleep (after R / R+ it was runnable right away).
CREATE TABLE thread_wait AS
    SELECT utid, ts, end_ts, end_state, cpu,
           CASE WHEN woken THEN wake_ts END AS wake_ts,
           CASE WHEN woken THEN waker_utid END AS waker_utid,
           CASE WHEN woken THEN target_cpu END AS target_cpu
    FROM (
        SELECT g.utid, g.gap_ts AS ts, g.gap_end AS end_ts, g.end_state, g.cpu,
               w.ts AS wake_ts, w.waker_utid, w.target_cpu,
               g.end_state NOT IN ('R', 'R+') AND w.ts < g.gap_end AS woken
        FROM (
            SELECT utid, ts + dur AS gap_ts,
                   LEAD(ts) OVER (PARTITION BY utid ORDER BY ts) AS gap_end,
                   end_state, cpu
            FROM sched_slice
            WHERE utid <> 0
        ) g
        ASOF LEFT JOIN (SELECT ts, wakee_utid, waker_utid, target_cpu FROM wakeup) w
            ON w.wakee_utid = g.utid AND w.ts >= g.gap_ts
        WHERE g.gap_end IS NOT NULL AND g.end_state IS NOT NULL
    );

CREATE VIEW thread_state AS
    SELECT ts, dur, utid, 'Running'::VARCHAR AS state, NULL::BIGINT AS waker_utid, cpu
    FROM sched_slice WHERE utid <> 0
    UNION ALL
    -- runnable right away (R, R+), or asleep until woken (or until the next
    -- slice if the waking was not seen)
    SELECT ts, COALESCE(wake_ts, end_ts) - ts, utid, end_state::VARCHAR, NULL, cpu
    FROM thread_wait
    UNION ALL
    -- woken, waiting for a CPU
    SELECT wake_ts, end_ts - wake_ts, utid, 'R', waker_utid, target_cpu
    FROM thread_wait WHERE wake_ts IS NOT NULL;

-- ---------------------------------------------------------------------------
-- thread and process
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE _instance_span AS
    SELECT utid, MIN(ts) AS first_ts, MAX(ts + dur) AS last_ts
    FROM sched_slice GROUP BY utid;

-- Names and tgids, newest evidence first: /proc at end, renames, first seen, birth.
CREATE TEMP TABLE _facts AS
    SELECT i.utid, f.ts, f.tgid, f.comm, f.rank
    FROM (
        SELECT ts, tid, tgid, comm, 1 AS rank FROM proc_snapshot
        UNION ALL SELECT ts, tid, NULL, new_comm, 2 FROM raw_task_rename
        UNION ALL SELECT ts, tid, tgid, comm, 3 FROM raw_task_exit
        UNION ALL SELECT ts, tid, tgid, comm, 4 FROM raw_task_seen
        UNION ALL SELECT ts, tid, tgid, comm, 5 FROM raw_task_new
    ) f
    ASOF JOIN _instance i ON i.tid = f.tid AND f.ts >= i.born_ts;

CREATE TEMP TABLE _thread_facts AS
    SELECT utid,
        ARG_MAX(comm, ts) FILTER (WHERE comm IS NOT NULL AND rank IN (1, 2, 3, 4)) AS last_name,
        ARG_MIN(comm, ts) FILTER (WHERE comm IS NOT NULL AND rank = 5) AS birth_name,
        ANY_VALUE(tgid) FILTER (WHERE tgid IS NOT NULL) AS tgid
    FROM _facts GROUP BY utid;

CREATE TEMP TABLE _thread0 AS
    SELECT i.utid, i.tid,
        CASE WHEN i.tid = 0 THEN 0 ELSE f.tgid END AS tgid,
        CASE WHEN i.tid = 0 THEN 'swapper' ELSE COALESCE(f.last_name, f.birth_name) END AS name,
        CASE WHEN i.born_ts < -9223372036854775000 THEN NULL ELSE i.born_ts END AS start_ts,
        x.ts AS end_ts,
        i.born_ts
    FROM _instance i
    LEFT JOIN _thread_facts f USING (utid)
    LEFT JOIN (
        SELECT i2.utid, MIN(e.ts) AS ts FROM raw_task_exit e
        ASOF JOIN _instance i2 ON i2.tid = e.tid AND e.ts >= i2.born_ts
        GROUP BY i2.utid
    ) x USING (utid);

-- A process is the instance of its leader thread (tid = tgid) alive when the
-- thread was born; upid 0 is the idle "process".
CREATE TEMP TABLE _thread_leader AS
    SELECT t.utid, l.utid AS leader_utid
    FROM _thread0 t
    ASOF LEFT JOIN (SELECT tid, born_ts, utid FROM _instance) l
        ON l.tid = t.tgid AND GREATEST(t.born_ts, -9223372036854775807) >= l.born_ts;

CREATE TABLE process AS
WITH leaders AS (
    SELECT DISTINCT leader_utid FROM _thread_leader WHERE leader_utid IS NOT NULL
), snap AS (
    -- the last snapshot's: a forked worker drops to its service user (setuid) after its
    -- first read may have seen it still as its parent's user
    SELECT tgid, ARG_MAX(process_comm, ts) AS name, ARG_MAX(cmdline, ts) AS cmdline,
           ARG_MAX(cgroup, ts) AS cgroup, ARG_MAX(euid, ts) FILTER (WHERE euid IS NOT NULL) AS euid,
           ARG_MAX(egid, ts) FILTER (WHERE egid IS NOT NULL) AS egid
    FROM proc_snapshot GROUP BY tgid
)
SELECT
    (ROW_NUMBER() OVER (ORDER BY (t.tid <> 0), t.tid, t.born_ts) - 1)::BIGINT AS upid,
    t.tid AS pid,
    COALESCE(s.name, t.name) AS name,
    s.cmdline,
    s.cgroup,
    t.start_ts,
    t.end_ts,
    list_contains(c.target_tgids, t.tid) AS is_target,
    t.utid AS leader_utid,
    s.euid,
    s.egid
FROM leaders l
JOIN _thread0 t ON t.utid = l.leader_utid
LEFT JOIN snap s ON s.tgid = t.tid
CROSS JOIN capture c;

CREATE TABLE thread AS
WITH last_snap AS (
    SELECT tid, ARG_MAX(nice, ts) AS nice, ARG_MAX(policy, ts) AS policy,
           ARG_MAX(cgroup, ts) AS cgroup
    FROM proc_snapshot GROUP BY tid
)
SELECT
    t.utid::BIGINT AS utid, t.tid, t.tgid, p.upid, t.name,
    p.name AS process_name,
    t.start_ts, t.end_ts,
    sp.first_ts AS first_seen_ts, sp.last_ts AS last_seen_ts,
    COALESCE(p.is_target, FALSE) AS is_target,
    s.nice, s.policy, s.cgroup,
    t.tid = t.tgid AS is_main_thread
FROM _thread0 t
LEFT JOIN _thread_leader tl USING (utid)
LEFT JOIN process p ON p.leader_utid = tl.leader_utid
LEFT JOIN _instance_span sp ON sp.utid = t.utid
-- /proc facts belong to the instance alive at the end (the last one of a tid).
LEFT JOIN last_snap s ON s.tid = t.tid AND t.end_ts IS NULL
ORDER BY utid;

-- Each recorded title (migration 8) to its process instance: the latest started at or before the
-- read (a reused pid is a new instance).
UPDATE process_title SET upid = (
    SELECT arg_max(p.upid, COALESCE(p.start_ts, -9223372036854775807)) FROM process p
    WHERE p.pid = process_title.pid AND COALESCE(p.start_ts, -9223372036854775807) <= process_title.ts);

DROP TABLE _tid_first; DROP TABLE _births; DROP TABLE _instance; DROP TABLE _instance_span; DROP TABLE _facts;
DROP TABLE _thread_facts; DROP TABLE _thread0; DROP TABLE _thread_leader;
