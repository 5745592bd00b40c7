"""synthesize's public surface: the names the other stages (runtime, refine) and the CLI shell use.

Everything else in synthesize is its own business and may change shape without telling anyone;
tests/test_boundaries.py checks that no other stage imports past this module (besides `cli.register`),
and docs/interfaces.md lists these names. They come in seven kinds:

- the profile: the typed model of a profile TOML and the rules of its names and options;
- reading and writing it: strict-TOML reading with located diagnostics, the deterministic writer;
- its compiled form: scx_layered's typed layer config, and where a capture's threads land in it;
- the presets: what an option is when a group, the catch-all or the scheduler leaves it unset;
- vetting: validate, compile, the scx_layered oracle and the placement lint in one call, with
  the compile facts a search's operators read;
- building a profile from a capture (what `threadwise synthesize CAPTURE` does);
- the review: what two profiles schedule differently, and the training record's header and mark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the synthesize module that defines it, by kind (the order of docs/interfaces.md's row).
# Loaded on first use (PEP 562), so a caller pays only for the modules of the names it imports:
# `threadwise --help` imports refine's record helpers, which must not load compile and pydantic.
_WHERE: dict[str, str] = {
    # the profile
    "Profile": "schema",
    "Group": "schema",
    "Treatment": "schema",
    "Evidence": "schema",
    "CatchAll": "schema",
    "Scheduler": "schema",
    "OPTION_KEYS": "schema",
    "MAX_US": "schema",
    "NAME_PATTERN": "schema",
    "NAME_RULE": "schema",
    "check_name": "schema",
    # reading and writing it
    "load_profile": "reader",
    "parse_profile": "reader",
    "read_text": "reader",
    "load_valid": "rules",
    "dumps": "writer",
    # its compiled form
    "compile_profile": "compile",
    "compile_null": "compile",
    "title_hints": "compile",
    "Compiled": "compile",
    "LayerConfig": "layered",
    "LayerSpec": "layered",
    "LayerKind": "layered",
    "KindName": "layered",
    "views_from_config": "layers",
    "thread_layers": "placement",
    # the presets
    "effective": "presets",
    "scheduler_args": "presets",
    "scheduler_interval_ms": "presets",
    # vetting
    "vet_profile": "vet",
    "Checked": "vet",
    "Refused": "vet",
    "OracleCheck": "vet",
    "oracle_check": "vet",
    "print_and_exit": "oracle",
    "compiled_config": "vet",
    "toml_text": "vet",
    "validation_errors": "vet",
    "compiled_default": "vet",
    "weight_bounds": "vet",
    "pattern_matches": "vet",
    # building from a capture
    "synthesize_capture": "from_capture",
    # the review
    "scheduling_changes": "diff",
    "RecordNote": "provenance",
    "NOT_THE_HEADERS": "provenance",
    "read_header": "provenance",
    "locate": "provenance",
    "record_sentence_missing": "provenance",
    "KEEP_DEFAULT_MARK": "provenance",
    "says_keep_default": "provenance",
}
__all__ = [  # the same names (tests/test_boundaries.py checks the two agree)
    "KEEP_DEFAULT_MARK",
    "MAX_US",
    "NAME_PATTERN",
    "NAME_RULE",
    "NOT_THE_HEADERS",
    "OPTION_KEYS",
    "CatchAll",
    "Checked",
    "Compiled",
    "Evidence",
    "Group",
    "KindName",
    "LayerConfig",
    "LayerKind",
    "LayerSpec",
    "OracleCheck",
    "Profile",
    "RecordNote",
    "Refused",
    "Scheduler",
    "Treatment",
    "check_name",
    "compile_null",
    "compile_profile",
    "compiled_config",
    "compiled_default",
    "dumps",
    "effective",
    "load_profile",
    "load_valid",
    "locate",
    "oracle_check",
    "parse_profile",
    "pattern_matches",
    "print_and_exit",
    "read_header",
    "read_text",
    "record_sentence_missing",
    "says_keep_default",
    "scheduler_args",
    "scheduler_interval_ms",
    "scheduling_changes",
    "synthesize_capture",
    "thread_layers",
    "title_hints",
    "toml_text",
    "validation_errors",
    "vet_profile",
    "views_from_config",
    "weight_bounds",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"threadwise.synthesize.api has no {name!r} (its names: docs/interfaces.md)")
    value = getattr(importlib.import_module(f"threadwise.synthesize.{_WHERE[name]}"), name)
    globals()[name] = value   # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # the same names, for readers and type checkers
    from threadwise.synthesize.compile import Compiled, compile_null, compile_profile, title_hints
    from threadwise.synthesize.diff import scheduling_changes
    from threadwise.synthesize.from_capture import synthesize_capture
    from threadwise.synthesize.layered import KindName, LayerConfig, LayerKind, LayerSpec
    from threadwise.synthesize.layers import views_from_config
    from threadwise.synthesize.oracle import print_and_exit
    from threadwise.synthesize.placement import thread_layers
    from threadwise.synthesize.presets import effective, scheduler_args, scheduler_interval_ms
    from threadwise.synthesize.provenance import (
        KEEP_DEFAULT_MARK,
        NOT_THE_HEADERS,
        RecordNote,
        locate,
        read_header,
        record_sentence_missing,
        says_keep_default,
    )
    from threadwise.synthesize.reader import load_profile, parse_profile, read_text
    from threadwise.synthesize.rules import load_valid
    from threadwise.synthesize.schema import (
        MAX_US,
        NAME_PATTERN,
        NAME_RULE,
        OPTION_KEYS,
        CatchAll,
        Evidence,
        Group,
        Profile,
        Scheduler,
        Treatment,
        check_name,
    )
    from threadwise.synthesize.vet import (
        Checked,
        OracleCheck,
        Refused,
        compiled_config,
        compiled_default,
        oracle_check,
        pattern_matches,
        toml_text,
        validation_errors,
        vet_profile,
        weight_bounds,
    )
    from threadwise.synthesize.writer import dumps
