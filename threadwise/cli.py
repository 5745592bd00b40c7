"""The `threadwise` command: a thin shell over the stage libraries.

Each stage owns its commands in `<stage>/cli.py` and registers them here with
`register(app)`; a command is a few lines that parse options and call the
library. Errors from the library are ThreadwiseError subclasses and become one
clear message and exit code in `main` (never a traceback for bad input).
Heavy imports (duckdb, polars, sklearn) happen inside commands, so `--help`
stays fast.
"""

from __future__ import annotations

import sys

import typer

from threadwise.errors import ThreadwiseError

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


def _register_stages() -> None:
    from threadwise import demo
    from threadwise.analyze import cli as analyze_cli
    from threadwise.observe import cli as observe_cli
    from threadwise.refine import cli as refine_cli
    from threadwise.runtime import cli as runtime_cli
    from threadwise.synthesize import cli as synthesize_cli

    for module in (observe_cli, analyze_cli, synthesize_cli, refine_cli, runtime_cli, demo):
        module.register(app)


def report(error: ThreadwiseError) -> None:
    """Print a ThreadwiseError the way every command does."""
    print(f"error: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"hint: {error.hint}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; usage errors exit 2 (typer), ThreadwiseErrors exit with their code."""
    _register_stages()
    try:
        app(args=argv, prog_name="threadwise")
    except ThreadwiseError as error:
        report(error)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
