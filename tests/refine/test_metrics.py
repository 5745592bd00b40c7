"""The metrics parsers on recorded output of the real tools, and the live rolesim reporter.

Every fixture is the unedited output of a real run; tests/refine/fixtures/README.md
gives the command that produced each. Expected values are read from the same
text by simpler means (csv.DictReader, a regex on one line, the histogram
summed by hand), never written into the test.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from threadwise import givenclock
from threadwise.errors import InputError
from threadwise.refine.measure.metrics import PARSERS, MetricsError, parse_metrics, require

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def line_value(text: str, label: str) -> float:
    """The first number after `label` on its line."""
    found = re.search(re.escape(label) + r"\s*([\d.]+)", text)
    assert found, label
    return float(found.group(1))


# -- redis-benchmark ------------------------------------------------------------------
# redis_benchmark_get_set.csv: redis-benchmark -h 127.0.0.1 -p 6399 -t get,set -n 50000 --csv -q
# redis_benchmark_many.csv:    redis-benchmark ... -t ping,set,get,incr,lpush,lpop,sadd,hset,zadd,lrange,mset


def test_redis_benchmark_every_column_of_every_test():
    text = fixture("redis_benchmark_get_set.csv")
    values = parse_metrics("redis-benchmark", text)
    rows = list(csv.DictReader(text.splitlines()))
    assert {row["test"] for row in rows} == {"GET", "SET"}
    for row in rows:
        test = row["test"].lower()
        assert values[f"{test}_rps"] == float(row["rps"])
        assert values[f"{test}_p50_ms"] == float(row["p50_latency_ms"])
        assert values[f"{test}_p99_ms"] == float(row["p99_latency_ms"])
        assert values[f"{test}_max_ms"] == float(row["max_latency_ms"])
        assert values[f"{test}_avg_ms"] == float(row["avg_latency_ms"])
    assert len(values) == len(rows) * (len(rows[0]) - 1)


def test_redis_benchmark_test_names_with_notes_and_helper_runs():
    text = fixture("redis_benchmark_many.csv")
    values = parse_metrics("redis-benchmark", text)
    rows = list(csv.DictReader(text.splitlines()))
    by_name = {row["test"]: row for row in rows}
    # "LRANGE_100 (first 100 elements)" -> lrange_100; "MSET (10 keys)" -> mset
    assert values["lrange_100_rps"] == float(by_name["LRANGE_100 (first 100 elements)"]["rps"])
    assert values["mset_p99_ms"] == float(by_name["MSET (10 keys)"]["p99_latency_ms"])
    # the helper "LPUSH (needed to benchmark LRANGE)" run does not replace the LPUSH test
    helper = by_name["LPUSH (needed to benchmark LRANGE)"]
    assert helper["rps"] != by_name["LPUSH"]["rps"]
    assert values["lpush_rps"] == float(by_name["LPUSH"]["rps"])
    assert values["ping_inline_rps"] == float(by_name["PING_INLINE"]["rps"])


def test_redis_benchmark_progress_lines_are_skipped():
    # without -q redis-benchmark writes "\r"-separated progress before each row
    text = fixture("redis_benchmark_get_set.csv")
    noisy = "\r".join(["SET: rps=17420.0 (overall: 17420.0) avg_msec=2.4",
                       *text.splitlines()]) + "\r\n"
    assert parse_metrics("redis-benchmark", noisy) == parse_metrics("redis-benchmark", text)


# -- sysbench ---------------------------------------------------------------------


def test_sysbench_cpu():
    text = fixture("sysbench_cpu.txt")  # sysbench cpu --threads=2 --time=3 run
    values = parse_metrics("sysbench", text)
    assert values["events_per_s"] == line_value(text, "events per second:")
    assert values["lat_avg_ms"] == line_value(text, "avg:")
    assert values["lat_max_ms"] == line_value(text, "max:")
    assert values["lat_p95_ms"] == line_value(text, "95th percentile:")
    assert "lat_sum_ms" not in values


def test_sysbench_threads_rate_from_events_and_time():
    text = fixture("sysbench_threads.txt")  # sysbench threads --threads=4 --time=2 run
    assert "events per second" not in text
    values = parse_metrics("sysbench", text)
    expected = line_value(text, "total number of events:") / line_value(text, "total time:")
    assert values["events_per_s"] == pytest.approx(expected)


def test_sysbench_oltp_transactions_queries_and_chosen_percentile():
    text = fixture("sysbench_oltp_read_write.txt")  # oltp_read_write ... --percentile=99 run
    values = parse_metrics("sysbench", text)
    assert values["transactions_per_s"] == float(re.search(r"transactions:.*\(([\d.]+) per sec", text)[1])
    assert values["queries_per_s"] == float(re.search(r"queries:.*\(([\d.]+) per sec", text)[1])
    assert values["lat_p99_ms"] == line_value(text, "99th percentile:")
    assert "lat_p95_ms" not in values


def test_sysbench_memory_bandwidth():
    text = fixture("sysbench_memory.txt")  # sysbench memory --threads=1 --time=2 run
    values = parse_metrics("sysbench", text)
    assert values["mib_per_s"] == float(re.search(r"\(([\d.]+) MiB/sec\)", text)[1])


# -- cyclictest -------------------------------------------------------------------


def _histogram(text: str) -> tuple[list[list[int]], list[int], list[int]]:
    """Per thread the list of (latency) samples expanded from the histogram, totals, overflows."""
    threads: list[list[int]] = []
    for line in text.splitlines():
        if line and line[0].isdigit():
            latency, *counts = (int(v) for v in line.split())
            while len(threads) < len(counts):
                threads.append([])
            for thread, count in enumerate(counts):
                threads[thread] += [latency] * count
    overflows = [int(v) for v in text.split("# Histogram Overflows:")[1].splitlines()[0].split()]
    maxima = [int(v) for v in text.split("# Max Latencies:")[1].splitlines()[0].split()]
    return threads, overflows, maxima


def test_cyclictest_summary_lines_worst_thread():
    text = fixture("cyclictest_t2.txt")  # cyclictest -t2 -D 2 -q -i 1000 -m
    values = parse_metrics("cyclictest", text)
    maxima = [int(v) for v in re.findall(r"Max:\s*(\d+)", text)]
    averages = [int(v) for v in re.findall(r"Avg:\s*(\d+)", text)]
    assert len(maxima) == 2
    assert values["max_us"] == max(maxima)
    assert values["avg_us"] == max(averages)
    assert [values["t0_max_us"], values["t1_max_us"]] == maxima
    assert "p99_us" not in values  # no histogram, no percentile


@pytest.mark.parametrize("name", ["cyclictest_t2_h2000.txt", "cyclictest_t1_h1000.txt"])
def test_cyclictest_histogram_percentiles(name: str):
    text = fixture(name)
    values = parse_metrics("cyclictest", text)
    threads, overflows, maxima = _histogram(text)
    assert values["max_us"] == max(maxima)
    assert values["overflows"] == sum(overflows)
    for thread, samples in enumerate(threads):
        n = len(samples) + overflows[thread]
        p99 = values[f"t{thread}_p99_us"]
        # the nearest-rank p99: at least 99% of samples at or below it, fewer strictly below
        assert sum(s <= p99 for s in samples) >= math.ceil(0.99 * n)
        assert sum(s < p99 for s in samples) < math.ceil(0.99 * n)
        assert values[f"t{thread}_p50_us"] <= p99 <= values[f"t{thread}_max_us"]
    assert values["p99_us"] == max(values[f"t{t}_p99_us"] for t in range(len(threads)))


def test_cyclictest_p99_among_overflows_is_the_max():
    # the recorded run with more samples beyond the histogram than 1% of all
    text = fixture("cyclictest_t1_h1000.txt")
    threads, overflows, maxima = _histogram(text)
    more = len(threads[0]) // 10
    edited = re.sub(r"# Histogram Overflows: \d+", f"# Histogram Overflows: {more:05d}", text)
    values = parse_metrics("cyclictest", edited)
    assert values["p99_us"] == maxima[0]
    assert values["p50_us"] < maxima[0]
    assert overflows[0] != more


# -- JSON lines -------------------------------------------------------------------


def test_rolesim_report_medians_over_the_lines():
    text = fixture("rolesim_report.jsonl")  # rolesim --hot 1 --workers 3 --report-ms 500 --duration 3
    rows = [json.loads(line) for line in text.splitlines()]
    values = parse_metrics("rolesim", text, source="service")
    for key in ("hot_chunks_per_s", "items_per_s", "worker_lat_p50_us", "worker_lat_p99_us"):
        assert values[key] == statistics.median(row[key] for row in rows)
    assert "ts" not in values and "interval_s" not in values
    # the window's lines only: the median of the last two
    assert parse_metrics("rolesim", "\n".join(text.splitlines()[-2:]), source="service")[
        "hot_chunks_per_s"] == statistics.median(row["hot_chunks_per_s"] for row in rows[-2:])


def test_jsonl_numeric_fields_blank_lines_and_a_single_summary_line():
    text = '{"rps": 10, "name": "x", "ok": true, "lat_ms": null}\n\n{"rps": 30, "lat_ms": 2.5}\n'
    assert parse_metrics("jsonl", text) == {"rps": 20.0, "lat_ms": 2.5}
    assert parse_metrics("jsonl", '{"rps": 7}', source="command") == {"rps": 7.0}


def test_jsonl_a_line_that_is_not_json_names_its_number():
    with pytest.raises(MetricsError, match=r"line 2: not JSON"):
        parse_metrics("jsonl", '{"rps": 1}\nWARNING: slow\n{"rps": 2}')
    with pytest.raises(MetricsError, match=r"line 1: a JSON list, not an object"):
        parse_metrics("jsonl", "[1, 2]")


def test_nothing_parseable_shows_the_first_lines():
    text = fixture("sysbench_cpu.txt")
    with pytest.raises(MetricsError) as caught:
        parse_metrics("redis-benchmark", text)
    assert "no redis-benchmark metrics" in caught.value.message
    assert text.splitlines()[0] in (caught.value.hint or "")
    assert isinstance(caught.value, InputError) and caught.value.exit_code == 2
    with pytest.raises(MetricsError, match="no output"):
        parse_metrics("cyclictest", "\n")
    with pytest.raises(MetricsError, match="unknown metrics parser"):
        parse_metrics("wrk", "x")


def test_require_names_what_is_missing_and_what_was_found():
    values = parse_metrics("redis-benchmark", fixture("redis_benchmark_get_set.csv"))
    assert require(values, ["get_rps"], parser="redis-benchmark") == {"get_rps": values["get_rps"]}
    with pytest.raises(MetricsError, match="no lpush_rps") as caught:
        require(values, ["get_rps", "lpush_rps"], parser="redis-benchmark")
    assert "get_rps" in (caught.value.hint or "")


@pytest.mark.parametrize(("parser", "name"), [
    ("redis-benchmark", "redis_benchmark_many.csv"), ("sysbench", "sysbench_oltp_read_write.txt"),
    ("sysbench", "sysbench_cpu.txt"), ("sysbench", "sysbench_memory.txt"),
    ("cyclictest", "cyclictest_t2_h2000.txt"), ("cyclictest", "cyclictest_t2.txt"),
    ("rolesim", "rolesim_report.jsonl"),
])
def test_every_key_produced_is_declared(parser: str, name: str):
    """Workload files are checked against the declarations: they must cover real output."""
    values = parse_metrics(parser, fixture(name))
    undeclared = [key for key in values if not PARSERS[parser].metrics.produces(key)]
    assert not undeclared
    assert not PARSERS[parser].metrics.produces("no_such_metric")


# -- rolesim, live ----------------------------------------------------------------


def _run_rolesim(*args: str, timeout: float = 15) -> tuple[subprocess.CompletedProcess[str], float]:
    from threadwise.refine.measure.bundled import build

    binary = build("rolesim")
    start = time.monotonic()
    result = givenclock.run([str(binary), *args], capture_output=True, text=True, timeout=timeout,
                            check=False)
    return result, time.monotonic() - start


def test_rolesim_reports_well_formed_plausible_lines():
    result, elapsed = _run_rolesim("--hot", "1", "--workers", "2", "--report-ms", "200", "--duration", "2")
    assert result.returncode == 0, result.stderr
    assert elapsed < 5
    assert result.stderr == "rolesim: ready\n"
    lines = result.stdout.splitlines()
    # one per 200-ms deadline of the 2 s; a reporter starved past deadlines skips them (fewer lines)
    assert 1 <= len(lines) <= 10
    rows = [json.loads(line) for line in lines]
    for row in rows:
        assert set(row) == {"ts", "interval_s", "hot_chunks_per_s", "items_per_s",
                            "worker_lat_p50_us", "worker_lat_p99_us"}
        assert abs(row["ts"] - time.time()) < 60
        # a late line is never followed by a near-empty one: at least half a period apart
        assert row["interval_s"] >= 0.1, rows
    # the intervals tile the run (a late report covers the time it was late, nothing is lost)
    assert sum(row["interval_s"] for row in rows) == pytest.approx(2.0, abs=0.45)
    assert [row["ts"] for row in rows] == sorted(row["ts"] for row in rows)
    values = parse_metrics("rolesim", result.stdout, source="service")
    assert values["hot_chunks_per_s"] > 0
    assert 0 < values["items_per_s"] < 600  # the feeder enqueues at most one item per 2 ms
    assert 0 <= values["worker_lat_p50_us"] <= values["worker_lat_p99_us"]


def test_rolesim_ready_comes_before_the_first_report():
    from threadwise.refine.measure.bundled import build

    result = givenclock.run([str(build("rolesim")), "--hot", "1", "--report-ms", "100", "--duration", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=15,
                            check=False)
    lines = result.stdout.splitlines()
    assert lines[0] == "rolesim: ready"
    assert all(line.startswith("{") for line in lines[1:]) and len(lines) > 3


def test_rolesim_nap_keeps_hot_threads_working_and_no_report_prints_nothing():
    napping, _ = _run_rolesim("--hot", "1", "--nap", "1", "--report-ms", "250", "--duration", "1")
    assert napping.returncode == 0
    assert parse_metrics("rolesim", napping.stdout, source="service")["hot_chunks_per_s"] > 0
    quiet, _ = _run_rolesim("--hot", "1", "--duration", "1")
    assert quiet.returncode == 0
    assert (quiet.stdout, quiet.stderr) == ("", "")
