"""What a config field is to the identity of a run (its id, and what a rerun in its folder must match), declared
with the field: `compile: bool = field(default=False, metadata=ADDED)`.

A field without a role is part of the identity: the safe default, for a field that changes what a run computes.
- EXCLUDED: it does not change what a run computes (where the run lives, how it is logged): left out whole.
- ADDED:    added after runs were made: left out while at its default, so each earlier run keeps its id and its
            folder stays resumable. Every field added to a config that runs were made with is declared so.
- LABEL:    it only labels how a run ended: left out; the legacy identity (`legacy=True`), which runs made while
            it was part of theirs still carry as their id, holds it where it is away from its default.

`identity(cls, values)` applies the roles of a config dataclass, and of the groups nested in it, to the plain dict
of a config's values; keys the dataclass does not declare stay.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

KEY = "identity"
"""The metadata key of a field's role."""
EXCLUDED, ADDED, LABEL = (MappingProxyType({KEY: name}) for name in ("excluded", "added", "label"))
"""The metadata of each role, for `dataclasses.field(metadata=...)`."""
ROLES = {role[KEY]: role for role in (EXCLUDED, ADDED, LABEL)}


@dataclasses.dataclass(frozen=True)
class Declared:
    """A field as the identity sees it: its role (None: part of it), its default, and its group's dataclass
    when it is a nested group."""

    role: Mapping[str, str] | None
    default: Any
    group: type | None


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each field of the dataclass `cls`."""
    return typing.get_type_hints(cls)


@functools.cache
def declared(cls: type) -> dict[str, Declared]:
    """Each field of the dataclass `cls` by name; metadata other than a known role is a ValueError naming the
    field."""
    found = {}
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        unknown = sorted(set(f.metadata) - {KEY})
        if unknown:
            raise ValueError(f"{cls.__name__}.{f.name}: unknown field metadata {', '.join(map(repr, unknown))}; a "
                             f"config field's metadata is its identity role only ({KEY!r}: {', '.join(ROLES)})")
        name = f.metadata.get(KEY)
        if name is not None and name not in ROLES:
            raise ValueError(f"{cls.__name__}.{f.name}: unknown identity role {name!r}; valid: {', '.join(ROLES)}")
        role = ROLES.get(name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if role in (ADDED, LABEL) and default is dataclasses.MISSING:
            raise ValueError(f"{cls.__name__}.{f.name}: a field declared {name} needs a default (it is left out of "
                             f"the identity at its default)")
        group = hints[f.name] if dataclasses.is_dataclass(hints[f.name]) else None
        found[f.name] = Declared(role, default, group)
    return found


def identity(cls: type, values: Mapping[str, Any], legacy: bool = False) -> dict[str, Any]:
    """`values` (a config of the dataclass `cls` as plain dicts) without what the fields' roles leave out; `legacy`:
    the identity from before the LABEL fields were left out (each held where away from its default)."""
    fields = declared(cls)
    kept = {}
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            kept[name] = value
            continue
        if field.role == EXCLUDED or (field.role == LABEL and not legacy):
            continue
        if field.role in (ADDED, LABEL) and value == field.default:
            continue
        kept[name] = identity(field.group, value, legacy) if field.group and isinstance(value, dict) else value
    return kept


def with_role(cls: type, role: Mapping[str, str], prefix: str = "") -> dict[str, Any]:
    """Every field of `cls` declared `role`, in the groups nested in it too (a group's role is its fields'): its
    dotted key -> its default."""
    found = {}
    for name, field in declared(cls).items():
        if field.role == role:
            found[prefix + name] = field.default
        elif field.role is None and field.group is not None:
            found |= with_role(field.group, role, f"{prefix}{name}.")
    return found
