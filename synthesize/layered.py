"""The scx_layered layer config, typed: what `compile` produces and lint, the oracle, the runtime read.

Mirrors scx_layered 1.1.4's `src/config.rs`: a config is a list of
`LayerSpec`s (name, comment, optional template, OR-blocks of AND-ed
`LayerMatch`es, and a `LayerKind`); a kind is `Confined`, `Grouped` or `Open`
with its own fields plus the `LayerCommon` options. Units are in the option
names, as scx_layered spells them (`slice_us`, `min_exec_us`).

The options threadwise sets or reads by name are fields of `LayerOptions`;
any other option the pinned scx_layered knows (matchers.py, the data
transcribed from config.rs) is kept as given in `LayerOptions.other`. Reading
JSON checks what serde would: one key per match object, known matchers and
kinds, known option names, the type of each typed option. A bad file is an
InputError naming the layer, before anything is handed to scx_layered (which
would silently drop an option it does not know).

`to_json_data()` gives the JSON form (key order fixed: the golden configs are
byte-stable); `LayerConfig.load(path)` and `from_json_data(raw)` read one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from threadwise.errors import InputError
from threadwise.synthesize.matchers import matcher_set

# The upper bound an open-ended AvgRuntime split is compiled with (a profile writes `[min]`):
# analyze's open end, i64 max in ns, in us rounded up; above any average runtime per run.
AVG_RUNTIME_OPEN_US = -(-(2**63 - 1) // 1000)

JsonObject = dict[str, Any]


class KindName(StrEnum):
    """config.rs `LayerKind` variants."""

    CONFINED = "Confined"
    GROUPED = "Grouped"
    OPEN = "Open"


@dataclass(frozen=True)
class LayerMatch:
    """One config.rs `LayerMatch`: a matcher name and its argument, JSON `{"CommPrefix": "hot-"}`."""

    kind: str
    value: Any

    @classmethod
    def comm_prefix(cls, prefix: str) -> LayerMatch:
        return cls("CommPrefix", prefix)

    @classmethod
    def comm_prefix_exclude(cls, prefix: str) -> LayerMatch:
        return cls("CommPrefixExclude", prefix)

    @classmethod
    def pcomm_prefix(cls, prefix: str) -> LayerMatch:
        return cls("PcommPrefix", prefix)

    @classmethod
    def cgroup_prefix(cls, path: str) -> LayerMatch:
        return cls("CgroupPrefix", path)

    @classmethod
    def uid_equals(cls, uid: int) -> LayerMatch:
        """The task's effective uid (main.bpf.c compares p->real_cred->euid)."""
        return cls("UIDEquals", uid)

    @classmethod
    def hint_equals(cls, hint: int) -> LayerMatch:
        """The task's entry in the task-hint map (`--task-hint-map`) equals `hint` (0..1024)."""
        return cls("HintEquals", hint)

    @classmethod
    def avg_runtime(cls, low_us: int, high_us: int | None = None) -> LayerMatch:
        """AvgRuntime [low, high) in us; high None: open-ended (AVG_RUNTIME_OPEN_US)."""
        # a tuple, as from_json_data reads it: a compiled config equals its JSON read back
        return cls("AvgRuntime", (low_us, AVG_RUNTIME_OPEN_US if high_us is None else high_us))

    def to_json_data(self) -> JsonObject:
        return {self.kind: list(self.value) if isinstance(self.value, tuple) else self.value}

    @classmethod
    def from_json_data(cls, raw: object) -> LayerMatch:
        if not isinstance(raw, dict) or len(raw) != 1:
            raise InputError(f"bad scx_layered match {raw!r}",
                             hint='each match is one {"Matcher": value} object')
        ((kind, value),) = raw.items()
        known = matcher_set()
        if kind not in known.matchers:
            raise InputError(f"unknown scx_layered matcher {kind!r}",
                             hint=f"scx_layered {known.version} knows {sorted(known.matchers)}")
        return cls(kind, tuple(value) if isinstance(value, list) else value)


def _no_options() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class LayerOptions:
    """A kind's fields and LayerCommon options; None: not set (scx_layered's default applies).

    Field order is the JSON key order of compiled configs.
    """

    util_range: tuple[float, float] | None = None     # Confined/Grouped: target utilisation band
    cpus_range: tuple[int, int] | None = None         # Confined/Grouped: min, max logical CPUs
    exclusive: bool | None = None                     # keep the SMT siblings of its CPUs idle
    protected: bool | None = None                     # Confined/Grouped: do not lend its CPUs
    preempt: bool | None = None                       # may preempt tasks of non-preempting layers
    preempt_first: bool | None = None                 # preempt the previous CPU before seeking an idle one
    slice_us: int | None = None
    min_exec_us: int | None = None                    # least runtime charged per run (vtime)
    weight: int | None = None
    disallow_preempt_after_us: int | None = None      # owned CPU busy this long: not preempted
    other: Mapping[str, Any] = field(default_factory=_no_options)  # any other known option, as given

    def __getitem__(self, option: str) -> Any:
        """An option's JSON value by its scx_layered name (KeyError when not set)."""
        return self.to_json_data()[option]

    def to_json_data(self) -> JsonObject:
        out: JsonObject = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "other" and value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return {**out, **self.other}


# How each typed option is checked when read (serde would refuse the same).
_PAIR_FLOAT, _PAIR_INT = "a pair of numbers", "a pair of non-negative integers"
_BOOL, _INT = "a bool", "a non-negative integer"
_TYPED: dict[str, str] = {"util_range": _PAIR_FLOAT, "cpus_range": _PAIR_INT, "exclusive": _BOOL,
                          "protected": _BOOL, "preempt": _BOOL, "preempt_first": _BOOL, "slice_us": _INT,
                          "min_exec_us": _INT, "weight": _INT, "disallow_preempt_after_us": _INT}
_NULLABLE = {"disallow_preempt_after_us"}   # config.rs Option<u64>: JSON null is "not set"


def _typed(layer: str, key: str, value: object) -> object:
    want = _TYPED[key]
    if value is None and key in _NULLABLE:
        return None
    ok = {
        _BOOL: isinstance(value, bool),
        _INT: isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        _PAIR_INT: isinstance(value, list) and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value),
        _PAIR_FLOAT: isinstance(value, list) and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value),
    }[want]
    if not ok:
        raise InputError(f"layer {layer!r}: option {key} = {value!r} is not {want}",
                         hint="see scx_layered's config.rs for each option's type")
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class LayerKind:
    """config.rs `LayerKind`: which kind of layer, and its options."""

    name: KindName
    options: LayerOptions = LayerOptions()

    def __post_init__(self) -> None:
        # compile builds kinds in code: an option this kind does not have is a bug there
        given = set(self.options.to_json_data())
        unknown = given - matcher_set().kind_options(self.name.value) - set(matcher_set().deprecated_options)
        if unknown:
            raise ValueError(f"{self.name.value} layers have no option(s) {sorted(unknown)}")

    @property
    def exclusive(self) -> bool:
        return bool(self.options.exclusive)

    @property
    def fixed_cpus(self) -> int | None:
        """CPUs of a Confined layer whose cpus_range is one number (min = max), else None."""
        cpus = self.options.cpus_range
        if self.name is KindName.CONFINED and cpus and cpus[0] == cpus[1]:
            return cpus[0]
        return None

    def to_json_data(self) -> JsonObject:
        return {self.name.value: self.options.to_json_data()}

    @classmethod
    def from_json_data(cls, layer: str, raw: object) -> LayerKind:
        known = matcher_set()
        if not isinstance(raw, dict) or len(raw) != 1:
            raise InputError(f"layer {layer!r}: kind must be one of {sorted(known.layer_kinds)} "
                             "and matches a list of lists")
        ((name, options),) = raw.items()
        if name not in known.layer_kinds:
            raise InputError(f"layer {layer!r}: unknown kind {name!r}",
                             hint=f"scx_layered knows {sorted(known.layer_kinds)}")
        if not isinstance(options, dict):
            raise InputError(f"layer {layer!r}: the {name} options must be an object")
        allowed = known.kind_options(name) | set(known.deprecated_options)
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise InputError(f"layer {layer!r}: scx_layered {known.version} has no {name} option "
                             f"{', '.join(unknown)} (it would drop it silently)",
                             hint=f"{name} options: {', '.join(sorted(allowed))}")
        typed = {key: _typed(layer, key, value) for key, value in options.items() if key in _TYPED}
        other = {key: value for key, value in options.items() if key not in _TYPED}
        return cls(KindName(name), LayerOptions(**typed, other=MappingProxyType(other)))


@dataclass(frozen=True)
class LayerSpec:
    """config.rs `LayerSpec`: one layer. `matches` are OR-ed blocks of AND-ed matches."""

    name: str
    matches: tuple[tuple[LayerMatch, ...], ...]
    kind: LayerKind
    comment: str | None = None
    template: LayerMatch | None = None

    @property
    def is_catch_all(self) -> bool:
        return self.matches == ((),)

    def to_json_data(self) -> JsonObject:
        out: JsonObject = {"name": self.name}
        if self.comment is not None:
            out["comment"] = self.comment
        if self.template is not None:
            out["template"] = self.template.to_json_data()
        out["matches"] = [[match.to_json_data() for match in block] for block in self.matches]
        out["kind"] = self.kind.to_json_data()
        return out

    @classmethod
    def from_json_data(cls, raw: object) -> LayerSpec:
        if not isinstance(raw, dict) or not {"name", "matches", "kind"} <= set(raw):
            raise InputError(f"not an scx_layered layer: {str(raw)[:80]}",
                             hint="a layer has name, matches and kind (and maybe comment, template)")
        name = raw["name"]
        unknown = sorted(set(raw) - {"name", "comment", "template", "matches", "kind"})
        if unknown:
            raise InputError(f"layer {name!r}: unknown key(s) {', '.join(unknown)}",
                             hint="a layer has name, comment, template, matches and kind")
        blocks = raw["matches"]
        if not isinstance(blocks, list) or not all(isinstance(block, list) for block in blocks):
            raise InputError(f"layer {name!r}: kind must be one of "
                             f"{sorted(matcher_set().layer_kinds)} and matches a list of lists")
        kind = LayerKind.from_json_data(name, raw["kind"])
        template = raw.get("template")
        return cls(name=str(name),
                   matches=tuple(tuple(LayerMatch.from_json_data(m) for m in block) for block in blocks),
                   kind=kind, comment=raw.get("comment"),
                   template=None if template is None else LayerMatch.from_json_data(template))


@dataclass(frozen=True)
class LayerConfig:
    """A whole scx_layered layer config: layers in first-match order, the catch-all last."""

    specs: tuple[LayerSpec, ...]

    def __iter__(self) -> Iterator[LayerSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def layer_names(self) -> list[str]:
        return [spec.name for spec in self.specs]

    def to_json_data(self) -> list[JsonObject]:
        """The JSON form scx_layered reads (`f:FILE`): a list of layer objects."""
        return [spec.to_json_data() for spec in self.specs]

    def to_json(self) -> str:
        return json.dumps(self.to_json_data(), indent=2) + "\n"

    @classmethod
    def from_json_data(cls, raw: object, *, source: str = "the config") -> LayerConfig:
        """A config from parsed JSON: a list of layers, or `{"specs": [...]}` (scx_layered's own)."""
        specs = raw.get("specs") if isinstance(raw, dict) else raw
        if not isinstance(specs, list) or not all(isinstance(spec, dict) for spec in specs):
            raise InputError(f"{source}: not an scx_layered layer config (expected a list of layer objects)",
                             hint="see `scx_layered --example FILE` for the format")
        return cls(tuple(LayerSpec.from_json_data(spec) for spec in specs))

    @classmethod
    def load(cls, path: Path) -> LayerConfig:
        """Read an scx_layered JSON layer config; InputError with file:line:col for bad JSON."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as bad:
            raise InputError(f"{path}:{bad.lineno}:{bad.colno}: invalid JSON: {bad.msg}",
                             hint="a .json file must be an scx_layered layer config (a list of layer specs)"
                             ) from None
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"{path}: cannot read: {error}") from error
        return cls.from_json_data(raw, source=str(path))
