"""A candidate of the refine search: a changed profile with a name, and the helpers that make one.

Shared by the operators of `mutate.py` (structure, sizing, treatment) and
`options.py` (scx_layered option overrides), so neither imports the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from threadwise.shape import Shape
from threadwise.synthesize.api import Group, Profile


@dataclass(frozen=True)
class Candidate:
    """A changed profile to try. `reserve_cores` overrides the shape's reserve when set."""

    name: str
    description: str
    profile: Profile
    reserve_cores: int | None = None

    def shape_for(self, shape: Shape) -> Shape:
        """The shape this candidate is compiled, linted and measured on."""
        if self.reserve_cores is None or self.reserve_cores == shape.reserve_cores:
            return shape
        return dataclasses.replace(shape, reserve_cores=self.reserve_cores)


def replace_group(profile: Profile, index: int, group: Group) -> Profile:
    groups = list(profile.groups)
    groups[index] = group
    return profile.model_copy(update={"groups": groups})


def replace_groups(profile: Profile, start: int, stop: int, new: Sequence[Group]) -> Profile:
    return profile.model_copy(update={"groups": [*profile.groups[:start], *new,
                                                 *profile.groups[stop:]]})


def changed(profile: Profile, index: int, name: str, description: str, **update: Any) -> Candidate:
    """A candidate whose group `index` has the fields of `update` changed."""
    group = profile.groups[index].model_copy(update=update)
    return Candidate(name, description, replace_group(profile, index, group))
