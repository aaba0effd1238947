"""The identity roles of config fields (loglinear/identity.py): what each leaves out, in nested groups too, and the
metadata they refuse."""

import dataclasses
from dataclasses import dataclass, field

import pytest

from loglinear.identity import ADDED, EXCLUDED, LABEL, identity, with_role


@dataclass
class Group:
    kept: int = 1
    added: int = field(default=2, metadata=ADDED)
    label: int = field(default=3, metadata=LABEL)
    where: str = field(default="here", metadata=EXCLUDED)


@dataclass
class Config:
    group: Group = field(default_factory=Group)
    logged: Group = field(default_factory=Group, metadata=EXCLUDED)
    seed: int = 0


def test_each_role_leaves_out_what_it_says():
    values = {"group": {"kept": 1, "added": 2, "label": 3, "where": "there"}, "logged": {"kept": 5}, "seed": 7}
    assert identity(Config, values) == {"group": {"kept": 1}, "seed": 7}
    changed = {"group": {"kept": 1, "added": 4, "label": 5, "where": "there"}, "seed": 7}
    assert identity(Config, changed) == {"group": {"kept": 1, "added": 4}, "seed": 7}
    assert identity(Config, changed, legacy=True) == {"group": {"kept": 1, "added": 4, "label": 5}, "seed": 7}
    assert identity(Config, values, legacy=True) == {"group": {"kept": 1}, "seed": 7}


def test_keys_the_config_does_not_declare_stay():
    assert identity(Config, {"group": {"older": 1}, "other": 2}) == {"group": {"older": 1}, "other": 2}


def test_the_roles_are_listed_by_dotted_key_with_their_defaults():
    assert with_role(Config, ADDED) == {"group.added": 2}
    assert with_role(Config, LABEL) == {"group.label": 3}
    assert with_role(Config, EXCLUDED) == {"group.where": "here", "logged": Group()}


@pytest.mark.parametrize("metadata, message", [
    ({"identity": "exclude"}, r"Bad\.x: unknown identity role 'exclude'; valid: excluded, added, label"),
    ({"identiy": "excluded"}, r"Bad\.x: unknown field metadata 'identiy'"),
    ({"identity": "added", "omitted_at": 0}, r"Bad\.x: unknown field metadata 'omitted_at'"),
])
def test_unknown_metadata_is_refused(metadata, message):
    bad = dataclasses.make_dataclass("Bad", [("x", int, field(default=0, metadata=metadata))])
    with pytest.raises(ValueError, match=message):
        identity(bad, {"x": 0})


def test_a_field_added_later_needs_a_default():
    bad = dataclasses.make_dataclass("Bad", [("x", int, field(metadata=ADDED))])
    with pytest.raises(ValueError, match=r"Bad\.x: a field declared added needs a default"):
        identity(bad, {"x": 0})
