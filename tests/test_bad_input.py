"""Every command against every class of bad input: `error:` + hint, the documented code, no traceback.

The classes (issue 13): a missing file; a wrong file kind (a capture where a
profile belongs, the reverse, a file that is not DuckDB at all); malformed
content; unknown keys (with a did-you-mean); out-of-range values; an existing
output without --force; a name with disallowed characters; a missing
privilege. Each case runs the real `threadwise` in a subprocess, in a scratch
directory holding real inputs (a capture written by CaptureBuilder, a profile
written by `synthesize --example`), and asserts the exit code, that stderr's
first line starts with `error:`, and that no `Traceback` appears anywhere.

`pytest -v tests/test_bad_input.py` lists the cases as `CLASS-COMMAND-what`.
A command that takes no input to get wrong is listed in NO_INPUT with the
reason, and a test checks that every command `threadwise --help` lists is in
one of the two, so a new command cannot go unswept. No case here can boot the
lab VM or attach a scheduler: each is refused before that.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from threadwise import givenclock

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    kind: str            # the class of bad input
    argv: tuple[str, ...]
    code: int            # the documented exit code (docs/interfaces.md)
    says: str = ""       # a phrase stderr must hold
    as_nobody: bool = False

    @property
    def command(self) -> str:
        words = [a for a in self.argv if not a.startswith("-")]
        return " ".join(words[:2]) if words[0] in GROUPS else words[0]

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.command.replace(' ', '_')}-{' '.join(self.argv[1:])[:60]}"


GROUPS = {"workload", "lab"}
CAP, PROF, TEXT, BIN = "capture.duckdb", "profile.toml", "README.md", "random.bin"

CASES = [
    # --- missing file --------------------------------------------------------------
    Case("missing", ("show", "nope.duckdb"), 2, "not found"),
    Case("missing", ("analyze", "nope.duckdb"), 2, "not found"),
    Case("missing", ("synthesize", "nope.duckdb", "--name", "x", "-o", "x.toml"), 2, "not found"),
    Case("missing", ("validate", "nope.toml"), 2, "no such file"),
    Case("missing", ("compile", "nope.toml"), 2, "no such file"),
    Case("missing", ("compile", PROF, "--shape", "/path/missing.json"), 2, "file not found"),
    Case("missing", ("lint", "nope.toml"), 2, "no such file"),
    Case("missing", ("lint", "nope.json"), 2, "no such file"),
    Case("missing", ("lint", PROF, "--capture", "nope.duckdb"), 2, "not found"),
    Case("missing", ("apply", "nope.toml"), 2, "no such file"),
    Case("missing", ("diff", "nope.toml", PROF), 2, "no such file"),
    Case("missing", ("workload", "check", "nope.toml"), 2, "no such file"),
    Case("missing", ("workload", "show", "rolesimm"), 2, "did you mean 'rolesim'"),
    Case("missing", ("ladder", "nope.toml", "--aa"), 2, "no such file"),
    Case("missing", ("ladder", "rolesim", "--arm", "nope.toml"), 2, "no such file"),
    Case("missing", ("train", "--workload", "nope.toml", "--name", "x"), 2, "no such file"),
    Case("missing", ("rejudge", "nope.duckdb"), 2, "no such ladder file"),
    Case("missing", ("ladder", "rolesim", "--aa", "-o", "nodir/x.duckdb"), 2, "nodir does not exist"),
    Case("missing", ("refine", "nope.toml", "--workload", "rolesim"), 2, "no such file"),
    Case("missing", ("observe", "--recover", "nope"), 2),
    Case("missing", ("export", "nope.duckdb", "-o", "x.pftrace"), 2, "not found"),
    Case("missing", ("import", "nope.pftrace", "-o", "x.duckdb", "--comm", "x"), 2, "not found"),
    Case("kind", ("export", PROF, "-o", "x.pftrace"), 2, "not a threadwise capture"),
    Case("kind", ("import", TEXT, "-o", "x.duckdb", "--comm", "x"), 2,
         "neither a Perfetto trace nor a perf.data"),
    Case("missing", ("observe", "-d", "1", "-o", "x.duckdb", "--", "/no/such/program"), 2, "cannot run"),
    Case("missing", ("clean", "no-such-dir"), 2, "no such directory"),
    # --- wrong file kind: a capture where a profile belongs, and the reverse -----------
    Case("kind", ("validate", CAP), 2, "this is a capture; validate takes a profile (TOML)"),
    Case("kind", ("compile", CAP), 2, "this is a capture; compile takes a profile"),
    Case("kind", ("lint", CAP), 2, "this is a capture; lint takes a profile"),
    Case("kind", ("apply", CAP), 2, "this is a capture; apply takes a profile"),
    Case("kind", ("diff", CAP, PROF), 2, "this is a capture; diff takes a profile"),
    Case("kind", ("diff", PROF, PROF, "--capture", PROF), 2, "not a threadwise capture"),
    Case("kind", ("workload", "check", CAP), 2, "this is a capture; workload check takes a workload"),
    Case("kind", ("refine", CAP, "--workload", "rolesim"), 2, "this is a capture"),
    Case("kind", ("ladder", "rolesim", "--arm", CAP), 2, "this is a capture"),
    Case("kind", ("train", "--workload", CAP, "--name", "x"), 2, "this is a capture"),
    Case("kind", ("rejudge", CAP), 2, "not a ladder file"),
    Case("kind", ("validate", "ladder.duckdb"), 2, "this is a ladder file"),
    Case("kind", ("show", PROF), 2, "not a threadwise capture (it is not a DuckDB file)"),
    Case("kind", ("analyze", PROF), 2, "not a threadwise capture (it is not a DuckDB file)"),
    Case("kind", ("synthesize", PROF, "--name", "x", "-o", "x.toml"), 2, "not a threadwise capture"),
    Case("kind", ("lint", PROF, "--capture", PROF), 2, "not a threadwise capture"),
    Case("kind", ("lint", PROF, "--capture", CAP), 2, "not a capture of this profile's workload"),
    Case("kind", ("show", "ladder.duckdb"), 2, "not a threadwise capture (it is a ladder file"),
    Case("kind", ("compile", PROF, "--shape", CAP), 2, "this is a capture"),
    # --- a file that is not DuckDB (nor text) ----------------------------------------
    Case("not-duckdb", ("show", TEXT), 2, "not a threadwise capture (it is not a DuckDB file)"),
    Case("not-duckdb", ("show", BIN), 2, "it is not a DuckDB file"),
    Case("not-duckdb", ("analyze", BIN), 2, "it is not a DuckDB file"),
    Case("not-duckdb", ("show", "empty.duckdb"), 2, "it is empty"),
    Case("not-duckdb", ("show", "fake.duckdb"), 2),
    Case("not-duckdb", ("validate", BIN), 2, "binary file"),
    # --- malformed content --------------------------------------------------------------
    Case("malformed", ("validate", "broken.toml"), 2, "invalid TOML"),
    Case("malformed", ("compile", "broken.toml"), 2, "invalid TOML"),
    Case("malformed", ("lint", "broken.toml"), 2, "invalid TOML"),
    Case("malformed", ("lint", "broken.json"), 2),
    Case("malformed", ("apply", "broken.toml"), 2, "invalid TOML"),
    Case("malformed", ("workload", "check", "broken.toml"), 2, "invalid TOML"),
    Case("malformed", ("compile", PROF, "--shape", "broken-shape.json"), 2, "not a shape file"),
    Case("malformed", ("compile", PROF, "--shape", "cores=two"), 2, "bad shape item"),
    Case("malformed", ("apply", PROF, "--duration", "soon"), 2, "cannot read --duration"),
    # --- unknown keys, with a did-you-mean --------------------------------------------
    Case("unknown-key", ("validate", "typo.toml"), 2, "did you mean 'treatment'"),
    Case("unknown-key", ("compile", "typo.toml"), 2),
    Case("unknown-key", ("diff", PROF, "typo.toml"), 2),
    Case("unknown-key", ("workload", "check", "typo-workload.toml"), 2, "did you mean 'service'"),
    Case("unknown-key", ("compile", PROF, "--shape", "cores=2,tcp=2"), 2, "tpc"),
    Case("unknown-key", ("compile", PROF, "--shap", "cores=2"), 2, "--shape"),
    Case("unknown-key", ("nosuchcommand",), 2, "No such command"),
    # --- out-of-range values -----------------------------------------------------------
    Case("range", ("validate", "range.toml"), 2, "cpu_fraction"),
    Case("range", ("show", CAP, "--top", "-1"), 2, "--top"),
    Case("range", ("observe", "-d", "-5", "--", "true"), 2, "duration"),
    Case("range", ("observe", "--pid", "999999999", "-d", "1"), 3),
    Case("missing", ("observe", "--cgroup", "/threadwise-no-such.slice/pod0", "-d", "1", "-o", "x.duckdb"), 3,
         "no cgroup '/threadwise-no-such.slice/pod0' in the cgroup v2 hierarchy"),
    Case("range", ("synthesize", CAP, "--name", "x", "-o", "x.toml", "--families", "turbo-families.toml"), 2,
         "turbo-families.toml:20: family[0].treatment"),
    Case("range", ("diff", PROF, "v2.toml"), 2, "schema_version 1, but v2.toml:"),
    Case("range", ("status", "--interval", "-1"), 2, "--interval"),
    Case("range", ("lab", "run", "--cpus", "0", "--", "true"), 2, "--cpus"),
    Case("range", ("lab", "run", "--timeout", "0", "--", "true"), 2, "--timeout"),
    Case("range", ("ladder", "rolesim", "--aa", "--levels", "-1"), 2, "--levels"),
    Case("range", ("train", "--workload", "rolesim", "--name", "x", "--levels", "a,b"), 2, "--levels"),
    Case("range", ("demo", "--repeats", "0"), 2, "--repeats"),
    Case("range", ("demo", "--out", TEXT), 2, "not a directory"),
    # --- an existing output without --force ------------------------------------------
    Case("exists", ("observe", "-d", "1", "-o", CAP, "--", "true"), 2, "already exists"),
    Case("exists", ("synthesize", "--example", "-o", PROF), 2, "already exists; not replaced"),
    Case("exists", ("synthesize", CAP, "--name", "x", "-o", PROF), 2, "already exists; not replaced"),
    Case("exists", ("compile", PROF, "--shape", "cores=2", "-o", TEXT), 2, "already exists; not replaced"),
    Case("exists", ("train", "--workload", "rolesim", "--name", "profile", "--profiles", "."), 2,
         "already exists"),
    # --- a name with disallowed characters ---------------------------------------------
    Case("name", ("synthesize", CAP, "--name", "my redis", "-o", "z.toml"), 2,
         "letters, digits, '_', '.' and '-'"),
    Case("name", ("synthesize", "--example", "--name", "a/b", "-o", "z.toml"), 2, "no spaces or '/'"),
    Case("name", ("train", "--workload", "rolesim", "--name", "my redis"), 2, "letters, digits"),
    Case("name", ("refine", PROF, "--workload", "rolesim", "--name", "-x"), 2, "starting with a letter"),
    Case("name", ("validate", "badname.toml"), 2, "not a valid name"),
    # --- a missing privilege (run as nobody) --------------------------------------------
    Case("privilege", ("observe", "-d", "1", "-o", "/tmp/x.duckdb", "--", "true"), 4, "root",
         as_nobody=True),
    Case("privilege", ("validate", "/root/.threadwise-not-readable.toml"), 4, "permission denied",
         as_nobody=True),
    # --- canary: bad input is refused before anything is attached or written ---------
    Case("missing", ("canary", "nope.toml", "--workload", "rolesim", "--probe-log", TEXT), 2,
         "no such profile"),
    Case("missing", ("canary", PROF, "--workload", "rolesim", "--probe-log", "nope.log"), 2,
         "no such log file"),
    Case("value", ("canary", PROF, "--workload", "rolesim", "--margin", "lots"), 2, "not a percentage"),
    Case("value", ("canary", PROF, "--workload", "rolesim", "--margin", "hot=5%", "--probe-log", TEXT), 2,
         "not a metric of workload rolesim"),
    Case("value", ("canary", PROF, "--workload", "rolesim"), 2, "names no probe"),
]

# Commands without an input a user could get wrong in one of the classes above.
NO_INPUT = {
    "stop": "no arguments but --json; stops only what `apply` started",
    "workload list": "no arguments; lists the bundled workloads",
    "lab kernel": "only --refresh; fetches or reuses the cached kernel",
    "info": "only --json; reports what this host has",
}


def _commands() -> set[str]:
    """Every command and sub-command `threadwise --help` lists."""
    import typer

    from threadwise import cli

    cli._register_stages()
    group = typer.main.get_command(cli.app)
    names: set[str] = set()
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        sub = getattr(command, "commands", None)
        names |= {f"{name} {s}" for s in sub} if sub else {name}
    return names


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with one file of every kind the cases name."""
    from threadwise.observe.builder import CaptureBuilder
    from threadwise.refine.measure.store import open_ladder
    from threadwise.synthesize.example import example_profile
    from threadwise.synthesize.writer import dumps

    root = tmp_path_factory.mktemp("bad-input")
    names = {10: "proc", 11: "hot-0", 12: "compactor"}
    cap = CaptureBuilder(start_ts=0, duration_ns=10**9, target_tgids=[10])
    cap.events("raw_task_seen", [(1, tid, 10, name) for tid, name in names.items()])
    cap.write(root / CAP)
    open_ladder(root / "ladder.duckdb").close()
    profile = dumps(example_profile("profile"))
    (root / PROF).write_text(profile)
    (root / "typo.toml").write_text(profile.replace("treatment =", "treatmnt =", 1))
    (root / "range.toml").write_text(profile.replace("cpu_fraction = 0.85", "cpu_fraction = 5.0", 1))
    assert "cpu_fraction = 5.0" in (root / "range.toml").read_text()
    (root / "badname.toml").write_text(profile.replace('name = "profile"', 'name = "my profile"', 1))
    (root / "broken.toml").write_text("schema_version = 1\nname = [\n")
    (root / "v2.toml").write_text(profile.replace("schema_version = 1", "schema_version = 2", 1))
    families = (ROOT / "synthesize" / "data" / "families-1.toml").read_text()
    (root / "turbo-families.toml").write_text(families.replace('treatment = "', 'treatment = "turbo', 1))
    (root / "broken.json").write_text('{"layers": [')
    (root / "broken-shape.json").write_text("{cores: 2")
    workload = (ROOT / "refine" / "workloads" / "rolesim.toml").read_text()
    (root / "typo-workload.toml").write_text(workload.replace("[service]", "[servce]", 1))
    (root / TEXT).write_text("# not a capture\n")
    (root / BIN).write_bytes(bytes(range(256)) * 16)
    (root / "empty.duckdb").write_bytes(b"")
    (root / "fake.duckdb").write_bytes(b"\0" * 8 + b"DUCK" + b"\xff" * 4084)
    os.chmod(root, 0o755)
    return root


def test_every_command_is_swept() -> None:
    covered = {case.command for case in CASES} | set(NO_INPUT)
    missing = _commands() - covered
    assert not missing, f"commands no bad-input case covers (add cases or a NO_INPUT reason): {missing}"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case: Case, scratch: Path, request: pytest.FixtureRequest) -> None:
    argv = [sys.executable, "-m", "threadwise.cli", *case.argv]
    # TMPDIR of our own: leftovers of other runs' killed observers there would add a note first
    (scratch / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "THREADWISE_RUN_DIR": str(scratch / "run"), "COLUMNS": "200",
           "TMPDIR": str(scratch / "tmp")}
    if case.as_nobody:
        # this checkout's Python as uid 65534, a readable copy of it where needed (conftest.py)
        nobody = request.getfixturevalue("nobody_python")
        if case.argv[1].startswith("/root/"):
            Path(case.argv[1]).write_text(scratch.joinpath(PROF).read_text())
            os.chmod(case.argv[1], 0o600)
        argv, env = nobody.command(*case.argv), nobody.environ(env)
    try:
        done = givenclock.run(argv, cwd=scratch, capture_output=True, text=True, timeout=120, env=env,
                              check=False)
    finally:
        if case.as_nobody and case.argv[1].startswith("/root/"):
            Path(case.argv[1]).unlink(missing_ok=True)
    shown = f"$ threadwise {' '.join(case.argv)}\n[exit {done.returncode}]\n{done.stderr}"
    assert "Traceback" not in done.stderr + done.stdout, shown
    lines = done.stderr.splitlines()
    assert lines and lines[0].startswith("error:"), shown
    assert any(line.startswith("hint:") for line in lines), shown
    assert done.returncode == case.code, shown
    assert case.says.lower() in done.stderr.lower(), shown
