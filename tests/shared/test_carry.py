"""Fields carried by name: what is named is copied as it is, and nothing else."""

from __future__ import annotations

import msgspec
import pytest

from bastion.proto.egress import GrantRequest
from bastion.shared.carry import carried, viewed


class _View(msgspec.Struct, frozen=True):
    tenant: str
    hosts: tuple[str, ...]


def test_carried_copies_the_named_fields_only() -> None:
    ask = GrantRequest(session_id="0123456789abcdef", tenant="acme", hosts=("a.example",))
    assert carried(ask, ("tenant", "hosts")) == {"tenant": "acme", "hosts": ("a.example",)}


def test_a_view_takes_its_own_fields_from_the_record() -> None:
    ask = GrantRequest(session_id="0123456789abcdef", tenant="acme", hosts=("a.example",))
    assert viewed(ask, _View) == _View(tenant="acme", hosts=("a.example",))


def test_a_name_the_source_lacks_is_an_error_not_a_default() -> None:
    ask = GrantRequest(session_id="0123456789abcdef", tenant="acme")
    with pytest.raises(AttributeError):
        carried(ask, ("tenant", "no_such_field"))
