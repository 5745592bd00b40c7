"""Roles from process titles (analyze/titles.py): processes that share one comm and say their
role in their title are grouped by title where their users tell them apart (scx_layered
UIDEquals), and kept as one group, with a note naming what is missing, where not."""

from __future__ import annotations

import polars as pl
import pytest

from threadwise.analyze import analyze_capture
from threadwise.analyze.render import render
from threadwise.analyze.titles import process_title
from threadwise.observe.builder import CaptureBuilder

MS = 1_000_000
T0 = 1_000_000_000
MASTER = "nginx: master process /usr/sbin/nginx -c /tmp/t/nginx.conf -p /tmp/t/"
WORKER = "nginx: worker process"
CACHE = "nginx: cache manager process"


@pytest.mark.parametrize(("cmdline", "comm", "title"), [
    (MASTER, "nginx", "master process"),
    (WORKER, "nginx", "worker process"),
    ("nginx: worker process is shutting down", "nginx", "worker process is shutting"),
    (CACHE, "nginx", "cache manager process"),
    ("postgres: checkpointer ", "postgres", "checkpointer"),
    ("postgres: app shop 127.0.0.1(51234) idle", "postgres", "app shop"),
    ("php-fpm: master process (/etc/php/8.2/fpm/php-fpm.conf)", "php-fpm8.2", "master process"),
    ("php-fpm: pool www", "php-fpm8.2", "pool www"),
    ("sshd: root@pts/0", "sshd", "root@pts/0"),
    ("/usr/sbin/nginx -g daemon off;", "nginx", None),        # an ordinary command line
    ("python3 -m app --role: worker", "python3", None),
    ("other: worker process", "nginx", None),                  # not the process's own name
    ("nginx: /usr/sbin/nginx", "nginx", None),                  # a name, then only arguments
    ("", "nginx", None),
    (None, "nginx", None),
])
def test_process_title(cmdline, comm, title):
    assert process_title(cmdline, comm) == title


def service(tmp_path, processes: list[tuple[int, str, int | None]], name: str = "svc",
            comm: str = "nginx", titles: dict[int, list[str]] | None = None):
    """One single-threaded process per (pid, cmdline, euid), all of comm `comm`: the first
    idles (a master), the others serve requests (short runs, frequent wakeups). `titles`: pid ->
    the titles the capture recorded over time (process_title), a read each 100 ms."""
    cap = CaptureBuilder(target_tgids=[pid for pid, _, _ in processes], duration_ns=2 * T0)
    for pid, seen in (titles or {}).items():
        for k, title in enumerate(seen):
            cap.title(T0 + k * 100 * MS, pid, title)
    for index, (pid, cmdline, euid) in enumerate(processes):
        cap.thread(pid, pid, comm)
        cap.process_identity(pid, cmdline=cmdline, euid=euid, egid=euid)
        if index == 0:
            for k in range(5):
                cap.slice(pid, 0, T0 + k * 300 * MS, 30_000)
            continue
        for k in range(200):
            ts = T0 + k * 5 * MS + index * 700_000
            cap.slice(pid, index % 2, ts, 150_000)
            cap.waking(ts - 20_000, 0, pid, cpu=1, target_cpu=index % 2)
    return analyze_capture(cap.write(tmp_path / f"{name}.duckdb"))


def by_uid(groups: pl.DataFrame) -> dict[int | None, dict]:
    return {row["uid"]: row for row in groups.to_dicts()}


def test_titles_with_their_own_users_become_one_group_each(tmp_path):
    analysis = service(tmp_path, [(100, MASTER, 0), (101, WORKER, 33), (102, WORKER, 33)])
    groups = by_uid(analysis.groups)
    assert set(groups) == {0, 33}
    master, workers = groups[0], groups[33]
    assert master["process_titles"] == ["master process"] and master["thread_count"] == 1
    assert workers["process_titles"] == ["worker process"] and workers["thread_count"] == 2
    for row in (master, workers):
        assert row["pattern"] == "nginx" and row["match_prefixes"] == ["nginx"]
        assert row["exclude_prefixes"] == [] and row["separable"]
        assert f"UIDEquals {row['uid']}" in row["note"]
    assert not analysis.names_separate_roles
    assert "+uid=33" in render(analysis) and "+uid=0" in render(analysis)
    assert any("worker process" in c and "uid 33" in c for c in analysis.caveats)


def test_titles_that_share_a_user_split_by_title(tmp_path):
    """No uid tells them apart: one group per title pattern, selected by title (a hinted layer),
    and the note says why users could not do it."""
    analysis = service(tmp_path, [(100, MASTER, 0), (101, WORKER, 0), (102, WORKER, 0)])
    rows = {tuple(r["title_patterns"]): r for r in analysis.groups.to_dicts()}
    assert set(rows) == {("nginx: master process",), ("nginx: worker process",)}
    workers = rows[("nginx: worker process",)]
    assert workers["thread_count"] == 2 and workers["uid"] is None
    assert workers["process_titles"] == ["worker process"]
    assert "every process runs as uid 0" in workers["note"] and "HintEquals" in workers["note"]
    assert rows[("nginx: master process",)]["thread_count"] == 1
    assert "+title='nginx: worker process'" in render(analysis)


def test_one_title_is_no_split(tmp_path):
    analysis = service(tmp_path, [(100, WORKER, 33), (101, WORKER, 33), (102, WORKER, 33)])
    assert analysis.groups["uid"].to_list() == [None] * analysis.groups.height
    assert all(t == [] for t in analysis.groups["process_titles"].to_list())
    assert not any("process title" in (n or "") for n in analysis.groups["note"].to_list())


def test_mixed_titles_share_a_group_where_they_share_a_user(tmp_path):
    analysis = service(tmp_path, [(100, MASTER, 0), (101, WORKER, 33), (102, WORKER, 33),
                                  (103, CACHE, 33)])
    groups = by_uid(analysis.groups)
    assert set(groups) == {0, 33}
    assert groups[0]["process_titles"] == ["master process"]
    assert groups[33]["process_titles"] == ["cache manager process", "worker process"]
    assert groups[33]["thread_count"] == 3
    assert "share uid 33" in groups[33]["note"]


def test_a_capture_without_user_ids_splits_by_title(tmp_path):
    """A capture from before schema migration 6 has no euid: titles alone select the roles."""
    analysis = service(tmp_path, [(100, MASTER, None), (101, WORKER, None), (102, WORKER, None)])
    patterns = sorted(tuple(r["title_patterns"]) for r in analysis.groups.to_dicts())
    assert patterns == [("nginx: master process",), ("nginx: worker process",)]
    assert all("migration 6" in r["note"] for r in analysis.groups.to_dicts())


def test_untitled_processes_form_their_own_class(tmp_path):
    analysis = service(tmp_path, [(100, "/usr/sbin/nginx -g daemon off;", 0), (101, WORKER, 33),
                                  (102, WORKER, 33)])
    groups = by_uid(analysis.groups)
    assert groups[0]["process_titles"] == ["untitled"]
    assert groups[33]["process_titles"] == ["worker process"]


POSTMASTER = "/usr/lib/postgresql/15/bin/postgres -D /tmp/pg/data -p 54321 -k /tmp/pg"
PG_ROLES = ["postgres: checkpointer ", "postgres: background writer ", "postgres: walwriter ",
            "postgres: autovacuum launcher ", "postgres: logical replication launcher "]


def postgres(tmp_path, name: str = "pg"):
    """A PostgreSQL 15 as pgbench leaves it: the postmaster (untitled), its auxiliary processes,
    and four backends of one user and database whose titles change with every query state; all
    of comm `postgres` and uid 110. The last cmdline the snapshots saw is a backend's `idle`."""
    backend = "postgres: bench bench 127.0.0.1({port}) {state}"
    processes = [(200, POSTMASTER, 110)] + [(201 + i, t, 110) for i, t in enumerate(PG_ROLES)]
    titles: dict[int, list[str]] = {}
    for i in range(4):
        pid, port = 210 + i, 40000 + i
        processes.append((pid, backend.format(port=port, state="idle"), 110))
        titles[pid] = [POSTMASTER] + [backend.format(port=port, state=s)
                                      for s in ("authentication", "idle", "UPDATE", "idle in transaction")]
    return service(tmp_path, processes, name=name, comm="postgres", titles=titles)


def test_postgres_roles_are_groups_of_their_own_by_title(tmp_path):
    """Every process is `postgres` of one uid: the auxiliary roles and the backends (their user
    and database; address and query state change) become title groups, the postmaster stays
    selected by comm."""
    analysis = postgres(tmp_path)
    rows = {tuple(r["title_patterns"]): r for r in analysis.groups.to_dicts()}
    assert ("postgres: checkpointer",) in rows and ("postgres: walwriter",) in rows
    assert ("postgres: background writer",) in rows
    assert rows[("postgres: bench bench",)]["thread_count"] == 4
    assert rows[("postgres: bench bench",)]["process_titles"] == ["bench bench"]
    untitled = [r for r in analysis.groups.to_dicts() if not r["title_patterns"]]
    assert [r["thread_count"] for r in untitled] == [1] and untitled[0]["match_prefixes"] == ["postgres"]
    assert all(r["uid"] is None and r["avg_runtime_range_ns"] is None for r in rows.values())
    assert "every process runs as uid 110" in rows[("postgres: walwriter",)]["note"]


def test_a_process_title_is_its_last_recorded_one(tmp_path):
    """A backend forked from the postmaster carries its title first; the role is the title it
    wrote, read from the titles recorded over time."""
    from threadwise.analyze.features import target_processes
    from threadwise.observe.store import open_capture

    path = tmp_path / "t.duckdb"
    cap = CaptureBuilder(target_tgids=[300], duration_ns=T0)
    cap.thread(300, 300, "postgres")
    cap.slice(300, 0, T0 + MS, 1000)
    cap.process_identity(300, cmdline=POSTMASTER, euid=110)
    cap.title(T0, 300, POSTMASTER)
    cap.title(T0 + 2 * MS, 300, "postgres: bench bench 127.0.0.1(4000) idle")
    with open_capture(cap.write(path)) as con:
        (proc,) = target_processes(con).values()
    assert proc.title == "bench bench" and proc.pattern == "postgres: bench bench"
