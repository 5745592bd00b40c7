"""The contracts between stages hold in the code: imports, errors, SQL.

- Rooms follow the pipeline: a stage imports only stages before it in ORDER
  (observe < analyze < synthesize < runtime < refine) and the core basics;
  the basics import no stage; only the CLI shell (threadwise/cli.py, demo.py)
  sits above every stage. So the stages' import graph has no cycle.
- Each stage imports another only through the modules and names listed in
  docs/interfaces.md ("Imports between stages"), found by an AST walk over
  every module of every stage (imports inside functions included).
- Every listed name exists (the list cannot rot).
- A function-local import of a threadwise module only defers a heavy dependency, and says so
  in a `# deferred:` comment (on its line, or heading its run of imports).
- Every ThreadwiseError subclass is defined in threadwise/errors.py.
- No stage module holds SQL in a string: queries live in `.sql` modules, each
  named statement with a comment header.
- No two of threadwise's modules import each other, directly or round a longer loop, counting
  imports inside functions (the shell's cli.py and demo.py once did).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("observe", "analyze", "synthesize", "refine", "runtime")
# The pipeline's order: each stage may import the ones before it. runtime (launching
# scx_layered, the lab) compiles profiles with synthesize and serves refine's measurements.
ORDER = ("observe", "analyze", "synthesize", "runtime", "refine")
# The core package's basics, below every stage (everyone may import them), and its shell,
# above every stage (the `threadwise` command and the demo, which import the stages).
BASICS = {"threadwise.errors", "threadwise.paths", "threadwise.scx", "threadwise.durations",
          "threadwise.sqlfiles", "threadwise.procs", "threadwise.topology", "threadwise.shape",
          "threadwise.givenclock", "threadwise.diagnostics", "threadwise.sourcemap", "threadwise.words",
          "threadwise.options", "threadwise.termination"}
SHELL = {"threadwise.cli", "threadwise.demo"}
SOURCES = sorted(p for d in (*STAGES, "threadwise") for p in (ROOT / d).rglob("*.py"))


def _owner(path: Path) -> str:
    return path.relative_to(ROOT).parts[0]


def _interfaces() -> dict[str, set[str]]:
    """docs/interfaces.md's table: module -> the names other stages may import."""
    text = (ROOT / "docs" / "interfaces.md").read_text()
    section = text.split("## Imports between stages", 1)[1]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.match(r"^\| `(threadwise\.[\w.]+)` \| (.+) \|$", line)
        if match:
            table[match.group(1)] = set(re.findall(r"`(\w+)`", match.group(2)))
    assert table, "no interface table found in docs/interfaces.md"
    return table


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every absolute threadwise import; name None: the module itself."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.startswith("threadwise.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("threadwise"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((node.lineno, sub, None) if _is_module(sub)
                             else (node.lineno, node.module, alias.name))
    return found


def _stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else "threadwise"


def _out_of_order(path: Path, owner: str) -> list[str]:
    """Imports of `path` (in `owner`: a stage, or "threadwise") that go against the pipeline."""
    bad = []
    for line, module, _name in _imports(path):
        target = _stage_of(module)
        core = ".".join(module.split(".")[:2])   # threadwise.<module> of a core import
        where = f"{path.name}:{line}: {module}"
        if owner == "threadwise":
            if target != "threadwise":
                bad.append(f"{where} (a core basic imports a stage)")
        elif target == "threadwise":
            if core not in BASICS:
                bad.append(f"{where} (a stage imports the core's shell, not a basic)")
        elif ORDER.index(target) > ORDER.index(owner):
            bad.append(f"{where} ({owner} imports {target}, a later stage)")
    return bad


def test_stages_import_only_earlier_stages():
    assert set(ORDER) == set(STAGES)
    core = {f"threadwise.{p.stem}" for p in (ROOT / "threadwise").glob("*.py") if p.stem != "__init__"}
    assert core == BASICS | SHELL, "a new core module: a basic (below the stages) or the shell (above)?"
    bad = []
    for path in SOURCES:
        owner = _owner(path)
        if owner == "threadwise" and f"threadwise.{path.stem}" in SHELL:
            continue
        bad += [f"{path.relative_to(ROOT).parent}/{entry}" for entry in _out_of_order(path, owner)]
    assert not bad, "imports against the pipeline's order:\n" + "\n".join(bad)


def test_the_order_check_catches_a_later_stage(tmp_path):
    stray = tmp_path / "x.py"
    stray.write_text("from threadwise.observe.store import open_capture\n"
                     "from threadwise.shape import synthetic\n"
                     "def f():\n    from threadwise.synthesize.layers import views_from_profile\n"
                     "    from threadwise import cli\n")
    assert _out_of_order(stray, "analyze") == [
        "x.py:4: threadwise.synthesize.layers (analyze imports synthesize, a later stage)",
        "x.py:5: threadwise.cli (a stage imports the core's shell, not a basic)"]
    assert _out_of_order(stray, "refine") == ["x.py:5: threadwise.cli (a stage imports the core's shell, "
                                              "not a basic)"]
    assert len(_out_of_order(stray, "threadwise")) == 2


def _module_of(path: Path) -> str:
    """The dotted name a source file is imported as (a stage folder is `threadwise.<stage>`)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts if parts[0] == "threadwise" else ["threadwise", *parts])


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import loop of `graph` (module -> the modules it imports) as the modules round it, the
    first repeated at the end; [] when there is none. A depth-first walk: an edge back to a module
    still on the walk's path closes a loop."""
    done: set[str] = set()
    path: list[str] = []

    def walk(module: str) -> list[str]:
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target in path:
                return [*path[path.index(target):], target]
            if target not in done and (found := walk(target)):
                return found
        done.add(path.pop())
        return []

    for module in sorted(graph):
        if module not in done and (found := walk(module)):
            return found
    return []


def test_no_import_cycle_among_threadwise_modules():
    modules = {_module_of(path): path for path in SOURCES}
    graph = {module: {target for _line, target, _name in _imports(path) if target in modules} - {module}
             for module, path in modules.items()}
    loop = _cycle(graph)
    assert not loop, "modules that import each other (imports inside functions count): " + " -> ".join(loop)


def test_the_cycle_check_finds_a_loop():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    assert _module_of(ROOT / "refine" / "measure" / "__init__.py") == "threadwise.refine.measure"
    assert _module_of(ROOT / "threadwise" / "cli.py") == "threadwise.cli"


# refine's rooms (docs/refine.md "Where the code lives"), lowest first: measure (the workload, the
# ladder, its file and the judge) knows nothing of a search; search decides from what measure
# stored; the record, train and the CLI (refine's top-level modules) sit on both.
# the canary (a profile judged on its live host) stands on measurement only, beside the search
REFINE_ROOMS = ("threadwise.refine.measure", "threadwise.refine.canary", "threadwise.refine.search",
                "threadwise.refine")


def _room(module: str) -> str | None:
    """The refine room of a module (None: not refine's); a package's own name counts as its room."""
    return next((room for room in REFINE_ROOMS if module == room or module.startswith(room + ".")), None)


def _room_of_path(path: Path) -> str | None:
    rel = path.relative_to(ROOT).with_suffix("")
    if rel.parts[0] != "refine":
        return None
    return _room("threadwise." + ".".join(rel.parts if rel.name != "__init__" else rel.parts[:-1]))


def _against_rooms(path: Path, room: str) -> list[str]:
    bad = []
    for line, module, _name in _imports(path):
        target = _room(module)
        if target is not None and REFINE_ROOMS.index(target) > REFINE_ROOMS.index(room):
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
            low, high = room.rpartition(".")[2], target.rpartition(".")[2]
            bad.append(f"{where}:{line}: {module} ({low} imports {high}, a room above it)")
    return bad


def test_refine_rooms_import_only_rooms_below():
    rooms = {_room_of_path(p) for p in SOURCES if _owner(p) == "refine"}
    assert rooms == set(REFINE_ROOMS), f"refine's rooms moved: {rooms}"
    flat = sorted(p.name for p in (ROOT / "refine").glob("*.py"))
    assert len(flat) <= 10, f"refine's top level is for the record, train and the CLI only: {flat}"
    bad = [entry for path in SOURCES if (room := _room_of_path(path)) for entry in _against_rooms(path, room)]
    assert not bad, "imports against refine's rooms:\n" + "\n".join(bad)


def test_the_room_check_catches_measure_importing_the_search(tmp_path):
    stray = tmp_path / "x.py"
    stray.write_text("from threadwise.refine.measure import stats\n"
                     "def f():\n    from threadwise.refine.search import loop\n"
                     "    from threadwise.refine import report\n")
    assert _against_rooms(stray, "threadwise.refine.measure") == [
        "x.py:3: threadwise.refine.search.loop (measure imports search, a room above it)",
        "x.py:4: threadwise.refine.report (measure imports refine, a room above it)"]
    assert _against_rooms(stray, "threadwise.refine.search") == [
        "x.py:4: threadwise.refine.report (search imports refine, a room above it)"]
    assert _against_rooms(stray, "threadwise.refine") == []


def test_stages_import_each_other_only_through_the_listed_interfaces():
    table = _interfaces()
    bad = []
    for path in SOURCES:
        owner = _owner(path)
        for line, module, name in _imports(path):
            if module in BASICS or _stage_of(module) in ("threadwise", owner):
                continue
            allowed = table.get(module)
            where = f"{path.relative_to(ROOT)}:{line}"
            if allowed is None:
                bad.append(f"{where}: {module} is not an interface")
            elif name is not None and name not in allowed:
                bad.append(f"{where}: {module}.{name} is not listed")
    assert not bad, "imports across stages not in docs/interfaces.md:\n" + "\n".join(bad)


def test_every_listed_interface_exists():
    missing = []
    for module, names in _interfaces().items():
        loaded = importlib.import_module(module)
        missing += [f"{module}.{n}" for n in sorted(names) if n.startswith("_") or not hasattr(loaded, n)]
    assert not missing, f"listed in docs/interfaces.md but not there (or private): {missing}"


def test_synthesize_shows_the_other_stages_one_module():
    """Outside synthesize, only `api` (and `cli.register`) is imported; api's lazy table, its
    `__all__`, the imports it shows type checkers and docs/interfaces.md's row name the same
    names, and each one is what its home module defines (so api never re-defines anything)."""
    table = _interfaces()
    rows = sorted(m for m in table if m.startswith("threadwise.synthesize"))
    assert rows == ["threadwise.synthesize.api", "threadwise.synthesize.cli"], rows
    api = importlib.import_module("threadwise.synthesize.api")
    shown = {alias.name for node in ast.walk(ast.parse((ROOT / "synthesize" / "api.py").read_text()))
             if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("threadwise.synthesize.")
             for alias in node.names}
    assert set(api._WHERE) == set(api.__all__) == shown == table["threadwise.synthesize.api"]
    for name, home in api._WHERE.items():
        assert getattr(api, name) is getattr(importlib.import_module(f"threadwise.synthesize.{home}"), name)


def test_the_boundary_check_catches_a_stray_import(tmp_path):
    """The walk sees imports inside functions and `from package import module` forms."""
    stray = tmp_path / "x.py"
    stray.write_text("def f():\n    from threadwise.analyze import groups\n"
                     "    from threadwise.observe.store import CaptureWriter\n")
    assert _imports(stray) == [(2, "threadwise.analyze.groups", None),
                               (3, "threadwise.observe.store", "CaptureWriter")]
    table = _interfaces()
    assert "threadwise.analyze.groups" not in table
    assert "CaptureWriter" not in table["threadwise.observe.store"]


def _undeferred(path: Path) -> list[str]:
    """Function-local threadwise imports without a `# deferred:` comment saying why, on the same
    line or heading the run of imports the statement belongs to (comment lines and other imports
    may stand between the comment and it)."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source, str(path))
    local = [node for func in ast.walk(tree) if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(func)
             if (isinstance(node, ast.Import) and any(a.name.startswith("threadwise") for a in node.names))
             or (isinstance(node, ast.ImportFrom) and node.level == 0
                 and (node.module or "").startswith("threadwise"))]
    spans = {line for node in local for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    bare = []
    for node in dict.fromkeys(local):   # a nested function's imports are walked twice
        row = node.lineno - 1
        said = "# deferred:" in lines[row]
        while not said and row > 0:
            row -= 1
            text = lines[row].strip()
            said = text.startswith("# deferred:")
            if not said and not text.startswith("#") and row + 1 not in spans:
                break
        if not said:
            bare.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:"
                        f"{node.lineno}: {ast.unparse(node)}")
    return bare


def test_a_function_local_import_says_why_it_is_deferred():
    """A stage imports at the top; one inside a function only defers a heavy dependency (polars,
    duckdb, sklearn, pydantic, ...: `threadwise --help` stays fast) and says so in a comment."""
    bare = [entry for path in SOURCES for entry in _undeferred(path)]
    assert not bare, "function-local imports without a `# deferred:` comment:\n" + "\n".join(bare)


def test_the_deferred_check_catches_a_bare_local_import(tmp_path):
    stray = tmp_path / "x.py"
    stray.write_text("def f():\n    # deferred: loads polars\n    from threadwise.analyze import api\n"
                     "    from threadwise.analyze import model\n\n"
                     "    from threadwise.errors import UsageError\n"
                     "def g():\n    from threadwise.paths import cache_dir  # deferred: no reason\n"
                     "    import threadwise.errors\n")
    assert _undeferred(stray) == ["x.py:6: from threadwise.errors import UsageError",
                                  "x.py:9: import threadwise.errors"]


def test_every_error_class_lives_in_errors_py():
    elsewhere = []
    for path in SOURCES:
        if path == ROOT / "threadwise" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                if bases & {"ThreadwiseError", "UsageError", "InputError", "TargetError", "MissingTool",
                            "PermissionProblem", "TracerError", "Exception"}:
                    elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not elsewhere, f"error classes outside threadwise/errors.py: {elsewhere}"


def test_exit_codes_tell_findings_and_refusals_from_failures():
    from threadwise import errors

    assert errors.FindingsReported.exit_code not in (0, 1)
    codes = {cls.exit_code: cls for cls in (errors.FindingsReported, errors.ConfigRefused,
                                            errors.GuestCommandFailed, errors.LabTimeout)}
    assert len(codes) == 4
    ordinary = {cls.exit_code for cls in vars(errors).values() if isinstance(cls, type)
                and issubclass(cls, errors.ThreadwiseError) and cls not in codes.values()}
    assert not set(codes) & ordinary


SQL_WORDS = re.compile(r"^\s*(--.*\n\s*)*(SELECT|WITH|INSERT INTO|UPDATE|DELETE FROM|CREATE|DROP|ALTER)\s")


def _checked(value: ast.expr, assigned: dict[str, str]) -> bool:
    """A value formatted into SQL text: a call of sqlfiles' `identifier` (whitelisted names) or
    `placeholders` (bound-parameter markers), or a name assigned from one."""
    source = assigned.get(value.id, "") if isinstance(value, ast.Name) else ast.unparse(value)
    return source.startswith(("identifier(", "placeholders(", "', '.join((identifier("))


def test_no_sql_in_python_strings():
    """Queries live in .sql modules; an f-string may only format in whitelisted identifiers."""
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        assigned = {target.id: ast.unparse(node.value) for node in ast.walk(tree)
                    if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}
        inside_fstrings = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                inside_fstrings |= {id(v) for v in node.values}
                if SQL_WORDS.match(text):
                    unchecked = [ast.unparse(v.value) for v in node.values
                                 if isinstance(v, ast.FormattedValue) and not _checked(v.value, assigned)]
                    if unchecked:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {unchecked} in SQL text")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in inside_fstrings and SQL_WORDS.match(node.value)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.strip()[:50]!r}")
    assert not found, "SQL belongs in .sql modules:\n" + "\n".join(found)


@pytest.mark.parametrize("sql", sorted(p for d in STAGES for p in (ROOT / d).rglob("*.sql")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_sql_modules_have_headers(sql):
    """Every statement of a .sql module starts with comment lines saying what it is."""
    from threadwise.sqlfiles import statements

    package = "threadwise." + sql.relative_to(ROOT).parts[0]
    name = "/".join(sql.relative_to(ROOT).parts[1:])
    for statement, text in statements(package, name).items():
        assert text.lstrip().startswith("--"), f"{sql.name}: statement {statement} has no header"


def test_identifiers_come_from_the_whitelist(tmp_path):
    from threadwise.observe.store import CaptureWriter
    from threadwise.sqlfiles import identifier

    assert identifier("capture", {"capture"}) == '"capture"'
    evil = 'x"; DROP TABLE capture; --'
    for bad, allowed in (("other", {"capture"}), (evil, {evil})):
        with pytest.raises(ValueError, match="not one of the identifiers allowed"):
            identifier(bad, allowed)   # not listed, or listed but not a plain name
    writer = CaptureWriter(tmp_path / "c.duckdb")
    try:
        with pytest.raises(ValueError):
            writer.insert("thread", [])
        with pytest.raises(TypeError, match="capture takes CaptureMeta"):
            writer.insert("capture", [object()])   # type: ignore[list-item]
        with pytest.raises(ValueError, match="not a raw table"):
            writer.append("capture", None)   # type: ignore[arg-type]
    finally:
        writer.abandon()
