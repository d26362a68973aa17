"""docs/configuration.md is what `python -m bastion.cli.configdoc` writes today: every
settings field and `bastion up` flag is on it, each saying what it changes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import msgspec
import pytest

from bastion.cli import configdoc
from bastion.shared.settings import BusSettings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
SOURCE_ROOTS = ("proto", "shared", "cli", "services")
REGENERATE = "run `python -m bastion.cli.configdoc` at the repository's top and commit the page"


def _settings_classes_in_source() -> set[str]:
    """The names of classes deriving from BusSettings (or from one that does), by reading
    the source, so a new service's settings cannot be left out of the generator; with them
    LogSettings, which every process reads apart."""
    bases: dict[str, set[str]] = {}
    for folder in SOURCE_ROOTS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    names = {
                        b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases
                    }
                    bases.setdefault(node.name, set()).update(names)
    found = {"BusSettings", "LogSettings"}
    grew = True
    while grew:
        more = {name for name, of in bases.items() if of & found} - found
        found |= more
        grew = bool(more)
    return found


def test_every_settings_struct_is_walked() -> None:
    in_source = _settings_classes_in_source()
    walked = {struct.__name__ for struct, _ in configdoc.SETTINGS}
    assert len(in_source) >= 7
    assert in_source == walked, (
        f"settings structs the generator does not walk: {sorted(in_source - walked)}; add them "
        "to SETTINGS in bastion.cli.configdoc with the process that reads them"
    )


def test_every_settings_field_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    missing = [
        f"{struct.__name__}.{field.name}"
        for struct, _ in configdoc.SETTINGS
        for field in msgspec.structs.fields(struct)
        if f"| `BASTION_{field.name.upper()}` |" not in page
    ]
    assert not missing, f"docs/configuration.md lacks {missing}: {REGENERATE}"


def _variables_named_in_source() -> dict[str, set[str]]:
    """Every `BASTION_*` variable written whole as a string in the code, and where."""
    named: dict[str, set[str]] = {}
    for folder in SOURCE_ROOTS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and re.fullmatch(r"BASTION_[A-Z0-9_]*[A-Z0-9]", node.value)
                ):
                    named.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    return named


def test_every_variable_the_code_names_is_on_the_page() -> None:
    # A variable read by hand (a flag's default from os.environ), or set for a hook, is
    # not a settings field: it must still be on the page.
    named = _variables_named_in_source()
    assert "BASTION_SKILLS_DIR" in named
    page = PAGE.read_text(encoding="utf-8")
    missing = {name: sorted(where) for name, where in named.items() if f"`{name}`" not in page}
    assert not missing, (
        f"docs/configuration.md lacks {missing}: add them to OUTSIDE_SETTINGS or GIVEN_TO_HOOKS "
        f"of bastion.cli.configdoc, then {REGENERATE}"
    )


def test_every_up_flag_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for flag in ("--state-dir", "--nats-port", "--http-port", "--replicas"):
        assert f"| `{flag}` |" in page, f"docs/configuration.md lacks {flag}: {REGENERATE}"


def test_the_page_is_what_the_generator_writes() -> None:
    assert PAGE.read_text(encoding="utf-8") == configdoc.render(), (
        f"docs/configuration.md is not what the settings say: {REGENERATE}"
    )


class _Undocumented(BusSettings, frozen=True, kw_only=True):
    an_unexplained_knob: int = 3


class _Documented(BusSettings, frozen=True, kw_only=True):
    a_knob: int = 3
    """How many knobs."""


def test_a_field_that_says_nothing_stops_the_generator() -> None:
    with pytest.raises(configdoc.UndocumentedSetting, match="an_unexplained_knob"):
        configdoc.variables(((_Undocumented, "nobody"),))


def test_a_field_docstring_becomes_its_row() -> None:
    (row,) = configdoc.variables(((_Documented, "somebody"),))
    assert row.name == "BASTION_A_KNOB"
    assert (row.default, row.type, row.changes, row.readers) == (
        "`3`",
        "int",
        "How many knobs.",
        ("somebody",),
    )
