"""The shell loads the one stage a command line needs (threadwise/cli.py `COMMANDS`)."""

from __future__ import annotations

import json
import subprocess
import sys

import typer

from threadwise import cli


def _names(typer_app: typer.Typer) -> set[str]:
    commands = {info.name or info.callback.__name__
                for info in typer_app.registered_commands if info.callback}
    return commands | {group.name for group in typer_app.registered_groups if group.name}


def test_each_stage_registers_exactly_the_commands_the_shell_routes_to_it() -> None:
    for stage, register in cli.STAGES.items():
        alone = typer.Typer()
        register(alone)
        assert _names(alone) == set(cli.COMMANDS[stage]), stage


def test_no_command_is_routed_to_two_stages() -> None:
    routed = [name for names in cli.COMMANDS.values() for name in names]
    assert len(routed) == len(set(routed))


def test_the_route_is_the_first_argument_and_anything_else_loads_every_stage() -> None:
    assert cli.stage_of(["stop", "--json"]) == "runtime"
    assert cli.stage_of(["lab", "run", "--", "threadwise", "train"]) == "runtime"
    assert cli.stage_of(["train", "--workload", "rolesim"]) == "refine"
    assert cli.stage_of(["--help"]) is None
    assert cli.stage_of([]) is None
    assert cli.stage_of(["stpo"]) is None


STAGE_CLIS = ["threadwise.analyze.cli", "threadwise.demo", "threadwise.observe.cli", "threadwise.refine.cli",
              "threadwise.runtime.cli", "threadwise.synthesize.cli"]


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], check=False, capture_output=True, text=True, timeout=120)


def _loaded_after(argv: list[str]) -> dict:
    """Run `threadwise ARGV` in a fresh interpreter: its exit status and which stage CLIs it imported."""
    probe = ("import json, sys\nfrom threadwise import cli\n"
             f"status = cli.main({argv!r})\n"
             "print(json.dumps({'status': status, 'loaded': sorted(m for m in sys.modules"
             f" if m in {STAGE_CLIS!r})}}))")
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_command_imports_only_its_own_stage() -> None:
    ran = _loaded_after(["stop", "--help"])
    assert ran == {"status": 0, "loaded": ["threadwise.runtime.cli"]}
    ran = _loaded_after(["validate", "--help"])
    assert ran == {"status": 0, "loaded": ["threadwise.synthesize.cli"]}
    # a stage of one command stays a command of the group, its name not taken for an argument
    ran = _loaded_after(["analyze", "--help"])
    assert ran == {"status": 0, "loaded": ["threadwise.analyze.cli"]}


def test_help_and_a_mistyped_command_see_every_command() -> None:
    assert _loaded_after(["--help"]) == {"status": 0, "loaded": STAGE_CLIS}
    mistyped = _python("-m", "threadwise.cli", "stpo")
    assert mistyped.returncode == 2
    assert "stop" in mistyped.stderr   # click's "Did you mean" needs every command registered


def test_the_demo_process_registers_each_later_stage_it_runs() -> None:
    """One process, commands of three stages in turn (the demo's steps run so)."""
    probe = ("from threadwise import cli\n"
             "for argv in (['stop', '--help'], ['validate', '--help'], ['train', '--help']):\n"
             "    assert cli.main(argv) == 0, argv\n"
             "print(sorted(cli._registered))")
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "['refine', 'runtime', 'synthesize']"
