"""The error hierarchy drawn in `bastion.shared.errors` names every error class of shared/."""

from __future__ import annotations

import importlib
import pkgutil

import bastion.shared
from bastion.shared import errors
from bastion.shared.errors import BastionError


def _shared_errors() -> dict[str, type[BastionError]]:
    found: dict[str, type[BastionError]] = {}
    for module in pkgutil.walk_packages(bastion.shared.__path__, "bastion.shared."):
        loaded = importlib.import_module(module.name)
        for value in vars(loaded).values():
            if (
                isinstance(value, type)
                and issubclass(value, BastionError)
                and value.__module__ == module.name
            ):
                found[value.__name__] = value
    return found


def test_the_drawn_hierarchy_names_every_error_of_shared_under_its_base() -> None:
    drawing = errors.__doc__ or ""
    found = _shared_errors()
    assert {"BastionError", "InvalidInput", "SandboxFailed", "TooLarge"} <= set(found)
    for name, error in found.items():
        assert name in drawing, f"{name} is not drawn in bastion.shared.errors"
        base = error.__mro__[1].__name__
        if error is not BastionError and base != "BastionError":
            line = next(line for line in drawing.splitlines() if name in line)
            above = drawing[: drawing.index(line)]
            assert base in above, f"{name} is not drawn under {base}"
