"""The `threadwise` command: a thin shell over the stage libraries.

Each stage owns its commands in `<stage>/cli.py` and registers them here with
`register(app)`; a command is a few lines that parse options and call the
library. Errors from the library are ThreadwiseError subclasses and become one
clear message and exit code in `main` (never a traceback for bad input).
Heavy imports (duckdb, polars, sklearn) happen inside commands, and a command
line imports the CLI of the one stage that owns its command (`COMMANDS`), so a
command starts fast: under the lab's emulation each Python import costs about
30 times what it does on the host (docs/layout.md "How long"). `--help`, no
command and an unknown one load every stage.
"""

from __future__ import annotations

import inspect
import json
import signal
import sys
import threading
import tomllib
from collections.abc import Callable

import typer

from threadwise import termination
from threadwise.errors import FindingsReported, InputError, PermissionProblem, ThreadwiseError, UsageError
from threadwise.termination import Terminated

app = typer.Typer(
    name="threadwise",
    help=(
        "Train thread-level scheduling profiles for Linux workloads.\n\n"
        "Pipeline: observe (eBPF -> DuckDB capture) -> analyze (features, roles) -> "
        "synthesize (profile TOML) -> compile/lint -> apply (scx_layered)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _group() -> None:
    """Keeps `threadwise` a group of commands when one stage with one command (analyze, demo) is
    all a command line registered: typer runs a lone command as the program itself."""


def _register_observe(typer_app: typer.Typer) -> None:
    # deferred: each stage's CLI is imported only by a command line that runs it (module docstring)
    from threadwise.observe import cli
    from threadwise.synthesize.api import thread_layers

    # observe's `export --profile` shows a later stage's knowledge (which layer takes a thread):
    # the shell, which sits above every stage, hands synthesize's placement down.
    cli.register(typer_app, place_threads=thread_layers)


def _register_analyze(typer_app: typer.Typer) -> None:
    # deferred: as in _register_observe
    from threadwise.analyze import cli

    cli.register(typer_app)


def _register_synthesize(typer_app: typer.Typer) -> None:
    # deferred: as in _register_observe
    from threadwise.refine.evidence import record_note
    from threadwise.synthesize import cli

    # validate and diff say whether a trained profile is the one its record measured: the record
    # is refine's ladder file, so the shell hands refine's reader down to synthesize likewise.
    cli.register(typer_app, record=record_note)


def _register_refine(typer_app: typer.Typer) -> None:
    # deferred: as in _register_observe
    from threadwise.refine import cli

    cli.register(typer_app)


def _register_runtime(typer_app: typer.Typer) -> None:
    # deferred: as in _register_observe
    from threadwise.runtime import cli

    cli.register(typer_app)


def _register_demo(typer_app: typer.Typer) -> None:
    # deferred: as in _register_observe
    from threadwise import demo

    # the demo runs each step as the command line a user would type, through this shell's runner
    demo.register(typer_app, run=run_command)


# Each stage's registration, in the order `threadwise --help` lists them ...
STAGES: dict[str, Callable[[typer.Typer], None]] = {
    "observe": _register_observe, "analyze": _register_analyze, "synthesize": _register_synthesize,
    "refine": _register_refine, "runtime": _register_runtime, "demo": _register_demo,
}
# ... and the top-level commands and groups each registers (tests/test_cli_stages.py checks the two agree).
COMMANDS: dict[str, tuple[str, ...]] = {
    "observe": ("observe", "show", "clean", "export", "import"),
    "analyze": ("analyze",),
    "synthesize": ("synthesize", "validate", "compile", "lint", "diff"),
    "refine": ("rejudge", "canary", "ladder", "train", "refine", "workload"),
    "runtime": ("apply", "status", "stop", "info", "lab"),
    "demo": ("demo",),
}
_registered: set[str] = set()


def stage_of(argv: list[str]) -> str | None:
    """The stage whose CLI a command line needs alone, or None for all of them: the first
    argument names the command (the top level takes no option but --help)."""
    first = argv[0] if argv else None
    return next((stage for stage, names in COMMANDS.items() if first in names), None)


def _register_stages(argv: list[str] | None = None) -> None:
    """Register the stage `argv` needs, or every stage (argv None, --help, no or an unknown
    command); once a stage a process: the demo runs its steps through `_main` too."""
    needed = None if argv is None else stage_of(argv)
    for stage, register in STAGES.items():
        if (needed is None or stage == needed) and stage not in _registered:
            register(app)
            _registered.add(stage)
    _unwrap_help(app)


def paragraphs(doc: str) -> str:
    """A command's docstring as --help shows it: each paragraph on one line, for the terminal to
    wrap (the docstring's own breaks, kept, cut a narrow terminal's lines mid-sentence); an
    indented paragraph is example commands, one a line, each shown after `$ ` (typer removes
    the help text's common indentation, so indenting alone does not mark them)."""
    blocks = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join("\n".join(f"  $ {line.strip()}" for line in block.splitlines())
                         if block.startswith(" ") else " ".join(block.split("\n")) for block in blocks)


def _unwrap_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = paragraphs(info.callback.__doc__)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _unwrap_help(group.typer_instance)


def report(error: ThreadwiseError) -> None:
    """Print a ThreadwiseError the way every command does; findings (exit 7) are results, not errors."""
    label = "findings" if isinstance(error, FindingsReported) else "error"
    print(f"{label}: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"hint: {error.hint}", file=sys.stderr)


def translate(exc: BaseException) -> ThreadwiseError | None:
    """The ThreadwiseError a library exception stands for when it reached the CLI, or None (a bug).

    Each of these means the input was bad (a file of the wrong kind, malformed
    text, a value out of range) or the system refused (a permission), never a
    bug of ours, so they get a message and the documented exit code instead of a
    traceback. Modules are looked up in sys.modules: an exception of a library
    that was never imported cannot have been raised.
    """
    pydantic = sys.modules.get("pydantic")
    duckdb = sys.modules.get("duckdb")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "value"
        more = len(exc.errors()) - 1
        return InputError(f"invalid {where}: {first['msg'][:1].lower()}{first['msg'][1:]}"
                          + (f" (and {more} more)" if more else ""),
                          hint="check the value against the command's --help and docs/")
    if isinstance(exc, tomllib.TOMLDecodeError):
        return InputError(f"invalid TOML: {exc}", hint="fix the TOML syntax (TOML 1.0; strings need quotes)")
    if isinstance(exc, json.JSONDecodeError):
        return InputError(f"invalid JSON: {exc}", hint="the file must be JSON")
    if isinstance(exc, UnicodeDecodeError):
        return InputError(f"an input file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                          hint="give a text file (a profile or workload TOML, a JSON config)")
    if duckdb is not None and isinstance(exc, duckdb.IOException):
        return InputError(f"cannot read a DuckDB file: {str(exc).splitlines()[0]}",
                          hint="give a capture or ladder file threadwise wrote")
    if duckdb is not None and isinstance(exc, duckdb.Error):
        return ThreadwiseError(f"DuckDB: {str(exc).splitlines()[0]}",
                               hint="if the file was written by threadwise, please report this")
    if isinstance(exc, (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)):
        return UsageError(f"{exc.filename or 'a path'}: {exc.strerror or exc}",
                          hint="check the path")
    if isinstance(exc, PermissionError):
        return PermissionProblem(f"{exc.filename or 'a path'}: {exc.strerror or exc}",
                                 hint="run as a user who may access it (root for tracing and apply)")
    if isinstance(exc, OSError):
        return ThreadwiseError(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}")
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the CLI (see `_main`) with SIGTERM turned into `Terminated` while it runs: exit 143,
    also when the exception went astray (lost in a finalizer, or turned into another error)."""
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    request = termination.COMMAND
    request.clear()
    try:
        with request.installed(signal.SIGTERM):
            try:
                status = _main(argv)
            except Exception as error:
                if request.signal is None:
                    raise
                # the SIGTERM surfaced as another error (DuckDB's "Query interrupted"): say which
                print(f"{type(error).__name__}: {error}", file=sys.stderr)
                status = 1
            request.check()
            return status
    except Terminated:
        print("terminated (SIGTERM): stopped what this command had started", file=sys.stderr)
        return 143
    finally:
        request.clear()


def run_command(argv: list[str]) -> int:
    """One `threadwise` command line run in this process (the demo's steps): its exit status, its
    errors reported as the command itself reports them."""
    return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    """Run the CLI; usage errors exit 2 (typer), ThreadwiseErrors exit with their code.

    Exceptions that stand for bad input or a refused operation (see `translate`)
    are reported the same way; anything else is a bug and keeps its traceback.
    """
    _register_stages(sys.argv[1:] if argv is None else argv)
    click_error, click_usage_error = _click_errors()
    try:
        status = app(args=argv, prog_name="threadwise", standalone_mode=False)
    except click_usage_error as usage:  # a bad option or argument: the same two lines as ours
        ctx = usage.ctx
        report(UsageError(usage.format_message(),
                          hint=f"{ctx.get_usage()}; see: {ctx.command_path} --help" if ctx else None))
        return usage.exit_code
    except click_error as failed:
        report(ThreadwiseError(failed.format_message()))
        return failed.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 1
    except ThreadwiseError as error:
        report(error)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        report(error)
        return error.exit_code
    return status if isinstance(status, int) else 0


def _click_errors() -> tuple[type[Exception], type[Exception]]:
    """click's ClickException and UsageError as typer uses them (its own copy of click, or click)."""
    by_name = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    return by_name["ClickException"], by_name["UsageError"]


if __name__ == "__main__":
    sys.exit(main())
