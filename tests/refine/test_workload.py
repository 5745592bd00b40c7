"""Workload files: the bundled ones load and measure what they claim; bad files fail at FILE:LINE."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tests import datafiles
from tests.datafiles import line_of
from threadwise import givenclock
from threadwise.errors import InputError, UsageError
from threadwise.refine.measure.metrics import PARSER_NAMES, parse_metrics
from threadwise.refine.measure.workload import (
    WorkloadError,
    bundled_names,
    bundled_workload_path,
    generator_argv,
    load_workload,
    render_argv,
    resolve_workload,
)
from threadwise.refine.measure.workload_schema import ParserName

FIXTURES = Path(__file__).parent / "fixtures"

# A bundled workload -> recorded output of exactly its load (see fixtures/README.md).
BUNDLED_OUTPUT = {
    "rolesim": "rolesim_report.jsonl",
    "redis": "redis_benchmark_get_set.csv",
    "cyclictest": "cyclictest_t2_h2000.txt",
    "poolservice": "poolservice_report.jsonl",
    "memcached": "mcload_c4_s3.jsonl",
    "mariadb": "sysbench_oltp_mariadb_t2_s3.txt",
    "onnxrt": "onnxload_report.jsonl",
    "postgres": "sysbench_oltp_postgres_t2_s3.txt",
}

VALID = datafiles.text("refine/workload-valid.toml")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(text)
    return path


def edit(old: str, new: str, text: str = VALID) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def fails(tmp_path: Path, text: str) -> WorkloadError:
    path = write(tmp_path, text)
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    return caught.value


# -- the bundled workloads ------------------------------------------------------------


def test_the_bundled_workloads_are_those_with_recorded_output():
    assert bundled_names() == sorted(BUNDLED_OUTPUT)


@pytest.mark.parametrize("name", sorted(BUNDLED_OUTPUT))
def test_bundled_workload_loads_and_its_parser_yields_its_objective(name: str):
    workload = load_workload(bundled_workload_path(name))
    assert workload.name == name
    text = (FIXTURES / BUNDLED_OUTPUT[name]).read_text()
    values = parse_metrics(workload.load.parser, text, source=workload.load.source)
    for metric in workload.objective.metrics():
        assert metric.metric in values, f"{name}: {metric.metric} not in {sorted(values)}"


def test_bundled_rolesim_is_a_self_reporting_service():
    workload = load_workload(bundled_workload_path("rolesim"))
    assert workload.load.source == "service" and workload.load.command is None
    assert workload.service is not None and workload.service.ready.log_line == "rolesim: ready"
    argv = render_argv(workload.service.command, window_s=workload.objective.window_s)
    assert os.access(argv[0], os.X_OK) and Path(argv[0]).name == "rolesim"
    assert "--report-ms" in argv


def test_bundled_cyclictest_runs_per_window_and_stays_sched_other():
    workload = load_workload(bundled_workload_path("cyclictest"))
    assert workload.service is None and workload.target.process == "cyclictest"
    argv = render_argv(workload.load.command or [], window_s=3.0)
    assert argv[argv.index("-D") + 1] == "3"
    assert not any(arg.startswith(("-p", "--priority")) for arg in argv)


def _option(argv: list[str], name: str) -> str | None:
    return next((arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}=")), None)


def test_bundled_mariadb_prepares_the_tables_its_load_reads():
    """sysbench's run reads the tables its prepare wrote: the two must name the same ones."""
    workload = load_workload(bundled_workload_path("mariadb"))
    service = workload.service
    assert service is not None and service.prepare is not None and workload.load.command is not None
    assert workload.target.process == "mariadbd" and service.prepare[-1] == "prepare"
    for option in ("tables", "table-size", "mysql-port", "mysql-host", "db-driver"):
        assert _option(service.prepare, option) == _option(workload.load.command, option) is not None, option
    assert _option(service.command, "port") == _option(workload.load.command, "mysql-port")
    wrapper = render_argv(service.command, window_s=5.0)[0]
    # the wrapper is a process of its own: its comm must not pass for the server's (PcommPrefix)
    assert os.access(wrapper, os.X_OK) and not Path(wrapper).name[:15].startswith("mariadbd")


def test_a_prepare_step_is_run_by_the_plan_once_the_service_is_ready(tmp_path: Path):
    from threadwise.refine.measure import ladder

    text = edit("ready_timeout_s = 5.0", 'ready_timeout_s = 5.0\nprepare = ["demo-load", "--rows", "10"]\n'
                "prepare_timeout_s = 60.0")
    workload = load_workload(write(tmp_path, text))
    assert workload.service is not None and workload.service.prepare == ["demo-load", "--rows", "10"]
    assert any(line.startswith("prepare:   `demo-load --rows 10` once") for line in workload.summary())
    def plan_of(workload: typing.Any) -> str:
        plan = ladder.make_plan(workload, [ladder.Arm(ladder.BASELINE)], levels=[0], repeats=1, shape="host")
        return ladder.plan_script(plan, attach_mode="runtime", spin=Path("/x/spin"), scx=None, tracer=None,
                                  layer_reader=None)

    script = plan_of(workload)
    assert "PREPARE_TIMEOUT=60" in script.splitlines()
    assert "prepare_cmd() { demo-load --rows 10; }" in script.splitlines()
    # the agent runs it inside service_start (agent.sh), before the first cell
    assert script.index("prepare_cmd()") < script.index("\nservice_start\n") < script.index("\ncell ")
    plain = plan_of(load_workload(write(tmp_path, VALID)))
    assert "prepare_cmd" not in plain and "PREPARE_TIMEOUT" not in plain


def test_a_prepare_timeout_without_a_prepare_command_is_an_error_at_its_line(tmp_path: Path):
    text = edit("ready_timeout_s = 5.0", "ready_timeout_s = 5.0\nprepare_timeout_s = 60.0")
    error = fails(tmp_path, text)
    assert f"w.toml:{line_of(text, 'prepare_timeout_s')}: prepare_timeout_s without a prepare command" \
        in error.message
    assert "add prepare = [...]" in (error.hint or "")


def test_an_empty_prepare_command_is_an_error_at_its_line(tmp_path: Path):
    text = edit("ready_timeout_s = 5.0", "ready_timeout_s = 5.0\nprepare = []")
    error = fails(tmp_path, text)
    assert f"w.toml:{line_of(text, 'prepare =')}: service.prepare: the command is empty" in error.message


def test_parser_names_match_the_metrics_module():
    assert set(typing.get_args(ParserName)) == set(PARSER_NAMES)


def test_bundled_lookup_and_resolution(tmp_path: Path):
    with pytest.raises(UsageError) as caught:
        bundled_workload_path("redus")
    assert "did you mean 'redis'" in (caught.value.hint or "")
    assert resolve_workload("redis") == bundled_workload_path("redis")
    own = write(tmp_path, VALID)
    assert resolve_workload(str(own)) == own
    with pytest.raises(UsageError, match="no such file"):
        load_workload(tmp_path / "missing.toml")


# -- render_argv ----------------------------------------------------------------------


def test_render_argv_whole_seconds_at_least_one_and_inside_arguments():
    assert render_argv(["x", "-D", "{window_s}"], window_s=5.0) == ["x", "-D", "5"]
    assert render_argv(["{window_s}"], window_s=4.2) == ["5"]  # never shorter than the window
    assert render_argv(["{window_s}"], window_s=0.2) == ["1"]
    assert render_argv(["--time={window_s}s", '{"a": 1}'], window_s=2) == ["--time=2s", '{"a": 1}']
    with pytest.raises(InputError, match="unknown placeholder"):
        render_argv(["{windows}"], window_s=1)


def test_render_argv_bundled_binaries():
    from threadwise.refine.measure.bundled import build

    assert render_argv(["{rolesim}", "--hot", "1"], window_s=1) == [str(build("rolesim")), "--hot", "1"]


# -- generator_argv: how a ladder runs the load command ------------------------------------


def test_the_load_command_runs_under_fifo_by_default_named_by_its_absolute_path(tmp_path: Path):
    load = load_workload(write(tmp_path, VALID)).load
    assert load.priority == "fifo"
    argv = generator_argv(load, window_s=5.0)
    benchmark = shutil.which("redis-benchmark")
    assert argv[:3] == ["chrt", "-f", "1"]
    # the program by its absolute path (the initramfs packer carries chrt's arguments that are
    # absolute paths to programs); the rest as render_argv gives it
    assert argv[3] == (benchmark or "redis-benchmark")
    assert argv[4:] == ["-p", "7000", "-t", "get,set", "--csv", "-q"]


def test_normal_priority_runs_the_load_command_as_written(tmp_path: Path):
    text = edit('parser = "redis-benchmark"', 'parser = "redis-benchmark"\npriority = "normal"')
    load = load_workload(write(tmp_path, text)).load
    assert load.priority == "normal"
    assert generator_argv(load, window_s=5.0) == render_argv(load.command or [], window_s=5.0)


def test_fifo_keeps_a_path_and_a_program_not_on_path_as_written(tmp_path: Path):
    absolute = edit('"redis-benchmark", "-p"', '"/opt/bench/bin/x", "-D", "{window_s}", "-p"')
    load = load_workload(write(tmp_path, absolute)).load
    assert generator_argv(load, window_s=2.5)[:6] == ["chrt", "-f", "1", "/opt/bench/bin/x", "-D", "3"]
    missing = edit('"redis-benchmark", "-p"', '"no-such-generator-here", "-p"')
    load = load_workload(write(tmp_path, missing)).load
    assert generator_argv(load, window_s=5.0)[3] == "no-such-generator-here"   # the guest may have it


def test_an_unknown_priority_is_an_error_at_its_line(tmp_path: Path):
    text = edit('parser = "redis-benchmark"', 'parser = "redis-benchmark"\npriority = "rt"')
    error = fails(tmp_path, text)
    assert f"w.toml:{line_of(text, 'priority =')}: load.priority:" in error.message
    assert "'fifo'" in error.message and "'normal'" in error.message


# -- bad files: FILE:LINE and a hint ----------------------------------------------------------


def test_a_valid_file_loads(tmp_path: Path):
    workload = load_workload(write(tmp_path, VALID))
    assert [m.metric for m in workload.objective.metrics()] == ["get_rps", "set_p99_ms", "get_p99_ms"]
    assert workload.objective.warmup_s == 1.0  # the default


def test_misspelt_key_did_you_mean(tmp_path: Path):
    text = edit('parser = "redis-benchmark"', 'parsr = "redis-benchmark"')
    error = fails(tmp_path, text)
    path = tmp_path / "w.toml"
    assert f"{path}:{line_of(text, 'parsr')}: unknown key 'load.parsr'" in error.message
    assert "did you mean 'parser'?" in (error.hint or "")
    # the missing parser is reported too, at its table's header
    assert f"{path}:{line_of(text, '[load]')}: missing required key 'load.parser'" in error.message


def test_misspelt_section_did_you_mean(tmp_path: Path):
    text = edit("[objective]", "[objectives]")
    error = fails(tmp_path, text)
    assert f":{line_of(text, '[objectives]')}: unknown key 'objectives'" in error.message
    assert "did you mean 'objective'?" in (error.hint or "")


def test_wrong_type(tmp_path: Path):
    text = edit("window_s = 5.0", 'window_s = "5"')
    error = fails(tmp_path, text)
    assert error.message == f"{tmp_path / 'w.toml'}:{line_of(text, 'window_s')}: " \
        "objective.window_s: input should be a valid number, got '5'"
    assert "number without quotes" in (error.hint or "")


def test_missing_section(tmp_path: Path):
    text = edit('[target]\nprocess = "demo-server"\n', "")
    error = fails(tmp_path, text)
    assert error.message.endswith(":1: missing required key 'target'")
    assert "docs/workload.md" in (error.hint or "")


@pytest.mark.parametrize(("ready", "found"), [
    ("{}", "none"),
    ('{ tcp_port = 7000, log_line = "up" }', "tcp_port and log_line"),
])
def test_ready_needs_exactly_one_kind(tmp_path: Path, ready: str, found: str):
    text = edit("ready = { tcp_port = 7000 }", f"ready = {ready}")
    error = fails(tmp_path, text)
    assert f":{line_of(text, 'ready =')}: service.ready: ready needs exactly one of" in error.message
    assert f"(found {found})" in error.message
    assert "tcp_port = 6399" in (error.hint or "")


def test_primary_metric_the_parser_cannot_produce(tmp_path: Path):
    text = edit('metric = "get_rps"', 'metric = "get_rsp"')
    error = fails(tmp_path, text)
    assert error.message.endswith(f":{line_of(text, 'get_rsp')}: the redis-benchmark parser "
                                  "cannot produce 'get_rsp'")
    assert "did you mean 'get_rps'?" in (error.hint or "")


def test_secondary_metric_is_located_by_index(tmp_path: Path):
    text = edit('metric = "get_p99_ms"', 'metric = "p99"')
    error = fails(tmp_path, text)
    line = line_of(text, '"p99"')
    assert error.message.endswith(f":{line}: the redis-benchmark parser "
                                  "cannot produce 'p99'")


def test_metric_of_a_test_the_command_does_not_run(tmp_path: Path):
    text = edit('metric = "get_rps"', 'metric = "lpush_rps"')
    error = fails(tmp_path, text)
    assert "'lpush_rps' needs the lpush test" in error.message
    assert "add lpush" in (error.hint or "")
    ranges = edit('"get,set"', '"get,set,lrange"', edit('metric = "get_rps"', 'metric = "lrange_100_rps"'))
    assert load_workload(write(tmp_path, ranges)).objective.primary.metric == "lrange_100_rps"


def test_cyclictest_percentile_needs_its_histogram(tmp_path: Path):
    text = (VALID.split("[service]", maxsplit=1)[0] + '[target]\nprocess = "cyclictest"\n[load]\n'
            'command = ["cyclictest", "-t2", "-D", "{window_s}", "-q"]\nparser = "cyclictest"\n'
            '[objective]\nprimary = { metric = "p99_us", direction = "lower" }\n')
    error = fails(tmp_path, text)
    assert f":{line_of(text, 'p99_us')}: 'p99_us' needs cyclictest's histogram" in error.message
    assert "-h" in (error.hint or "")
    fixed = text.replace('"-q"]', '"-q", "-h", "2000"]')
    assert load_workload(write(tmp_path, fixed)).objective.primary.metric == "p99_us"


@pytest.mark.parametrize(("old", "new", "where", "message"), [
    ('command = ["redis-benchmark", "-p", "7000", "-t", "get,set", "--csv", "-q"]', "command = []",
     "command = []", "load.command: the command is empty"),
    ('command = ["demo-server", "--port", "7000"]', 'command = ["", "--port"]',
     'command = [""', "service.command: the command's program (its first word) is empty"),
])
def test_empty_command(tmp_path: Path, old: str, new: str, where: str, message: str):
    text = edit(old, new)
    error = fails(tmp_path, text)
    assert error.message.endswith(f":{line_of(text, where)}: {message}")
    assert "list of strings" in (error.hint or "")


def test_unknown_placeholder(tmp_path: Path):
    text = edit('"--port", "7000"]', '"--time", "{window}"]')
    error = fails(tmp_path, text)
    assert "unknown placeholder {window}" in error.message
    assert "{window_s}" in (error.hint or "")


def test_service_source_needs_a_service_and_no_command(tmp_path: Path):
    no_service = VALID.split("[service]", maxsplit=1)[0] + VALID.split("ready_timeout_s = 5.0\n")[1]
    text = edit('source = "command"', 'source = "service"', no_service)
    error = fails(tmp_path, text)
    assert f":{line_of(text, 'source =')}: source = \"service\" needs a [service] section" in error.message
    assert f":{line_of(text, 'redis-benchmark')}: load.command is not used" in error.message


def test_target_longer_than_a_comm(tmp_path: Path):
    text = edit('process = "demo-server"', 'process = "demo-server-process"')
    error = fails(tmp_path, text)
    assert f":{line_of(text, 'process =')}: target.process: 'demo-server-process' is longer" in error.message


def test_toml_syntax_error_has_line_and_column(tmp_path: Path):
    text = edit('name = "demo"', 'name = "demo')
    error = fails(tmp_path, text)
    assert f"w.toml:{line_of(text, 'name =')}:" in error.message
    assert "invalid TOML" in error.message


def test_unsupported_schema_version(tmp_path: Path):
    text = "# a comment\n" + edit("schema_version = 1", "schema_version = 2")
    error = fails(tmp_path, text)
    assert error.message.endswith(f":{line_of(text, 'schema_version')}: schema_version 2 is not supported")
    assert "schema_version = 1" in (error.hint or "")


def test_several_problems_in_line_order(tmp_path: Path):
    text = edit("window_s = 5.0", "window_s = -1.0", edit('name = "demo"', 'name = "-demo"'))
    error = fails(tmp_path, text)
    lines = error.message.splitlines()
    assert len(lines) == 2
    assert f":{line_of(text, 'name =')}: name:" in lines[0]
    assert f":{line_of(text, 'window_s')}: objective.window_s:" in lines[1]


# -- the command ----------------------------------------------------------------------------


def tw(*args: str) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_workload_check_summarises():
    done = tw("workload", "check", "redis")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{bundled_workload_path('redis')}: ok\n")
    assert "redis-server --bind 127.0.0.1 --port 6399" in done.stdout
    assert "TCP port 6399" in done.stdout
    assert "redis-benchmark" in done.stdout and "get_rps (higher is better)" in done.stdout


def test_workload_check_reports_file_line_and_hint(tmp_path: Path):
    text = edit('parser = "redis-benchmark"', 'parsr = "redis-benchmark"')
    path = write(tmp_path, text)
    done = tw("workload", "check", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {path}:{line_of(text, '[load]')}: missing required key "
                                  "'load.parser'\n")
    assert "\nhint: " in done.stderr and "did you mean 'parser'?" in done.stderr


def test_workload_list_and_show():
    done = tw("workload", "list")
    assert [line.split()[0] for line in done.stdout.splitlines()] == bundled_names()
    done = tw("workload", "show", "cyclictest")
    assert done.stdout == bundled_workload_path("cyclictest").read_text()


# -- the canary's probe -----------------------------------------------------------------


def test_a_probe_table_names_where_a_canary_reads_the_live_service(tmp_path: Path):
    text = VALID + '\n[probe]\ncommand = ["redis-benchmark", "-p", "7000", "-t", "get", "--csv"]\n'
    workload = load_workload(write(tmp_path, text))
    assert workload.probe is not None and workload.probe.command == ["redis-benchmark", "-p", "7000", "-t",
                                                                     "get", "--csv"]
    assert load_workload(write(tmp_path, VALID)).probe is None   # the ladder and train need none


@pytest.mark.parametrize(("table", "where", "says"), [
    ('log = "/var/log/x.log"\ncommand = ["x"]', "[probe]", "probe: probe needs exactly one of log, command, "
                                                           "prometheus (found log and command)"),
    ('log = ""', "log =", "probe.log: string should have at least 1 character"),
    ('prometheus = "http://127.0.0.1:9121/metrics"', "[probe]", "probe: prometheus needs series"),
    ('prometheus = "http://10.0.0.8:9121/metrics"\nseries = { get_rps = { name = "x" } }', "prometheus =",
     "probe.prometheus: 'http://10.0.0.8:9121/metrics' is not an http:// URL on loopback"),
    ('log = "/var/log/x.log"\nseries = { get_rps = { name = "x" } }', "[probe]",
     "probe: series go with prometheus"),
    ('prometheus = "http://[::1]:9/m"\nseries = { get_rps = { name = "x", scale = 0 } }', "series =",
     "probe.series.get_rps.scale: input should be greater than 0"),
])
def test_a_probe_needs_exactly_one_source_and_says_where(tmp_path: Path, table: str, where: str, says: str):
    text = VALID + f"\n[probe]\n{table}\n"
    error = fails(tmp_path, text)
    assert f"w.toml:{line_of(text, where)}: {says}" in error.message, error.message


def test_the_canary_takes_the_command_lines_probe_else_the_files(tmp_path: Path):
    from threadwise.errors import UsageError
    from threadwise.refine.canary.command import CanaryOptions, probe_of
    from threadwise.refine.canary.probe import CommandProbe, LogProbe
    from threadwise.shape import synthetic

    log = tmp_path / "service.log"
    log.write_text("")
    named = load_workload(write(tmp_path, VALID + f'\n[probe]\nlog = "{log}"\n'))
    bare = load_workload(write(tmp_path, VALID))

    def options(**given: object) -> CanaryOptions:
        fields = {"profile": tmp_path / "p.toml", "workload": "w", "shape": synthetic(2), "margin": 0.1,
                  "max_duration_s": 60.0, "alpha": 0.05, "out": tmp_path / "c.duckdb",
                  "command": "threadwise canary"}
        return CanaryOptions(**{**fields, **given})  # type: ignore[arg-type]

    from_file = probe_of(options(), named)
    assert isinstance(from_file, LogProbe) and from_file.path == log and from_file.parser == "redis-benchmark"
    assert isinstance(probe_of(options(probe_command=["x", "{window_s}"]), named), CommandProbe)
    with pytest.raises(UsageError, match="names no probe") as refused:
        probe_of(options(), bare)
    assert "[probe]" in (refused.value.hint or "")


def test_a_canary_margin_can_be_set_per_metric_and_must_name_one(tmp_path: Path):
    from threadwise.errors import UsageError
    from threadwise.refine.canary.command import metrics_of

    workload = load_workload(write(tmp_path, VALID))
    metrics = {m.name: m for m in metrics_of(workload, 0.1, {"get_p99_ms": 0.25})}
    assert metrics["get_rps"].margin == 0.1 and metrics["get_rps"].primary
    assert metrics["get_p99_ms"].margin == 0.25 and not metrics["get_p99_ms"].higher_is_better
    with pytest.raises(UsageError, match="get_p100_ms") as refused:
        metrics_of(workload, 0.1, {"get_p100_ms": 0.25})
    assert "get_rps" in (refused.value.hint or "")


def test_a_prometheus_probe_needs_a_series_for_every_objective_metric(tmp_path: Path):
    from threadwise.refine.canary.command import CanaryOptions, probe_of
    from threadwise.refine.canary.probe import PrometheusProbe
    from threadwise.shape import synthetic

    table = '\n[probe]\nprometheus = "http://127.0.0.1:9121/metrics"\n[probe.series]\n'
    one = 'get_rps = { name = "redis_commands_total", labels = { cmd = "get" }, rate = true }\n'
    options = CanaryOptions(profile=tmp_path / "p.toml", workload="w", shape=synthetic(2), margin=0.1,
                            max_duration_s=60.0, alpha=0.05, out=tmp_path / "c.duckdb",
                            command="threadwise canary")
    # refused where the file is read, at the [probe.series] line, before any canary starts
    refused = fails(tmp_path, VALID + table + one)
    [problem] = refused.diagnostics
    assert "[probe.series] names no series for set_p99_ms, get_p99_ms" in problem.message
    assert problem.line == (VALID + table).count("\n")   # the [probe.series] header
    assert (problem.hint or "").startswith("add one per objective metric")
    both = one + "".join(f'{m}_p99_ms = {{ name = "request_seconds", scale = 1000, '
                         f'labels = {{ cmd = "{m}", quantile = "0.99" }} }}\n' for m in ("get", "set"))
    probe = probe_of(options, load_workload(write(tmp_path, VALID + table + both)))
    assert isinstance(probe, PrometheusProbe) and probe.series["get_p99_ms"].scale == 1000
