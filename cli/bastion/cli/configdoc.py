"""`python -m bastion.cli.configdoc`: write docs/configuration.md from the typed settings.

It walks each process's settings struct (the `BASTION_<FIELD>` variables `load_settings`
reads) and `bastion up`'s flags, and renders one table of each: name, default, what it
changes (the field's docstring, else a note kept here), and who reads it; with them, the
few variables read outside a struct and those given to command hooks. A test renders the
page again and fails when docs/configuration.md differs.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from bastion.cli import up
from bastion.egress.settings import EgressSettings
from bastion.hooks.settings import HooksSettings
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.settings import PolicySettings
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.errors import BastionError
from bastion.shared.logs import LogSettings
from bastion.shared.settings import ENV_PREFIX, BusSettings
from bastion.vault.settings import VaultSettings

__all__ = ["SETTINGS", "UndocumentedSetting", "render"]

SETTINGS: tuple[tuple[type[msgspec.Struct], str], ...] = (
    (BusSettings, "every service, the hook runner"),
    (LogSettings, "every service, the hook runner, the `bastion` CLI"),
    (OrchestratorSettings, "orchestrator"),
    (PolicySettings, "policy"),
    (SandboxSettings, "sandbox"),
    (EgressSettings, "egress"),
    (McpSettings, "mcp"),
    (VaultSettings, "vault"),
    (HooksSettings, "hook runner"),
)
"""Every settings struct of a process, and the process that reads it."""

CLI_READS = frozenset(
    {
        "state_dir",
        "nats_url",
        "nats_creds",
        "nats_nkey_seed_file",
        "nats_user",
        "nats_password",
        "nats_inbox_prefix",
    }
)
"""Fields the `bastion` commands read too (`bastion.shared.statedir`)."""

NOTES: dict[str, str] = {
    "nats_url": "The NATS server to connect to.",
    "nats_password": "That user's password.",
    "nats_inbox_prefix": "The prefix of the process's reply subjects; each NATS user may "
    "receive replies on its own prefix only.",
    "request_timeout_s": "How long a request on the bus waits for its reply.",
    "drain_timeout_s": "How long a stopping process lets requests in flight finish.",
    "state_dir": "Bastion's state directory (policies, keys, NATS data, logs); never shown "
    "to, nor accepted as, a workspace.",
    "sessions_bucket": "The KV bucket of sessions.",
    "journal_bucket": "The KV bucket of the journal (calls already run, by their key).",
    "hooks_bucket": "The KV bucket where hooks register.",
    "approvals_bucket": "The KV bucket of parked calls and their answers.",
    "turns_bucket": "The KV bucket of session turns (which replica runs a session's call).",
    "taint_s": "How long a result from outside taints a session; 0 turns taint off.",
    "policy_dir": "The operator's Cedar policies (`*.cedar`); empty: `<state dir>/policies`. "
    "A directory that does not exist means no operator policies.",
    "policy_poll_s": "How often the policy service looks for changed policy files.",
    "bwrap": "The bubblewrap program.",
    "prlimit": "The prlimit program that sets a command's resource limits.",
    "git_writable": "Lets commands write the workspace's `.git/hooks` and `.git/config` "
    "(read-only by default: they would run later, outside any sandbox).",
    "cgroups": "False skips the per-command cgroup (falls back to RLIMIT_NPROC).",
    "max_sandboxes_per_tenant": (
        "One tenant's concurrent sandboxes across every instance, its live background "
        "tasks included."
    ),
    "tenant_wait_s": "How long a call over the tenant's cap waits before it is refused.",
    "docker_memory_bytes": "A Docker sandbox's memory limit.",
    "docker_pids": "A Docker sandbox's process limit.",
    "docker_cpus": "A Docker sandbox's CPUs.",
    "docker_tmp_bytes": "The size of a Docker sandbox's `/tmp`.",
    "egress_max_duration_s": "How long one proxied connection may last.",
    "egress_idle_timeout_s": "How long one proxied connection may stay silent.",
    "egress_connect_timeout_s": "How long connecting to a destination may take.",
    "egress_resolve_timeout_s": "How long resolving a destination's name may take.",
    "egress_fetch_timeout_s": "How long `fetch_url` may take to read a page.",
    "egress_brave_url": "The Brave Search API's address.",
    "egress_tavily_url": "The Tavily API's address.",
    "egress_search_timeout_s": "How long one `web_search` may take.",
    "http_listen": "The front door's `host:port`; not loopback only with a token configured.",
    "http_tokens_file": "The front door's tokens (`label:token` a line, mode 600); empty: "
    "`<state dir>/http-tokens`.",
    "http_origins": "Browser origins the front door accepts, comma-separated; a request "
    "with another `Origin` is refused.",
    "http_answer_timeout_s": "How long the front door waits for the orchestrator's answer.",
    "http_max_body_bytes": "The largest request body the front door's `/v1` HTTP API reads "
    "(`/mcp` has `BASTION_MCP_MAX_REQUEST_BYTES`).",
    "vault_master_key": "The master key, base64; wins over the key file. Given to the vault only.",
    "vault_master_key_file": "The master key's file; empty: `<state dir>/vault/master.key`.",
    "vault_other_master_key_file": "The previous master key during a rotation: it opens "
    "secrets, never wraps them.",
    "vault_lease_keys": "The only X25519 public keys (base64, comma-separated) a lease is "
    "sealed to, when set.",
}
"""What a field changes, for fields whose struct has no docstring under them."""

FACTORY_DEFAULTS: dict[str, str] = {
    "state_dir": "`$XDG_STATE_HOME/bastion`, else `~/.local/state/bastion`",
    "docker_owner": "the host's name",
}
"""The default of a field made by a factory, in words (it depends on the machine)."""


@dataclass(frozen=True)
class Variable:
    """One `BASTION_*` variable, as the page shows it."""

    name: str
    default: str
    type: str
    changes: str
    readers: tuple[str, ...]


OUTSIDE_SETTINGS: tuple[Variable, ...] = (
    Variable(
        name="BASTION_SKILLS_DIR",
        default="`skills`",
        type="str",
        changes="The skills directory `bastion skill install` and `bastion skill list` use "
        "when not given `--skills-dir`.",
        readers=("the `bastion` CLI",),
    ),
)
"""Variables read outside a settings struct (`os.environ` in a command's flag default)."""

GIVEN_TO_HOOKS: tuple[tuple[str, str], ...] = (
    ("BASTION_HOOK_EVENT", "The event the command hook runs for (`before-tool`, …)."),
    ("BASTION_SESSION", "The id of the session the event is about."),
)
"""Variables the hook runner sets for a command hook, which gets no other `BASTION_*`
variable (`bastion.hooks.command`)."""


class UndocumentedSetting(BastionError):
    """A settings field has neither a docstring nor a note, or its default has no words."""

    code = "undocumented_setting"


def _field_docstrings(struct: type[msgspec.Struct]) -> dict[str, str]:
    """The docstrings written under the fields of `struct`'s own class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(struct)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    found: dict[str, str] = {}
    for field, after in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[field.target.id] = " ".join(after.value.value.split())
    return found


def _own_fields(struct: type[msgspec.Struct]) -> Iterator[msgspec.structs.FieldInfo]:
    """The fields `struct` adds to the structs it derives from."""
    inherited = {
        f.name
        for base in struct.__mro__[1:]
        if isinstance(base, type) and issubclass(base, msgspec.Struct) and base is not struct
        for f in msgspec.structs.fields(base)
    }
    for field in msgspec.structs.fields(struct):
        if field.name not in inherited:
            yield field


def _default(field: msgspec.structs.FieldInfo) -> str:
    if field.default is not msgspec.NODEFAULT:
        value: Any = field.default
        if value is None:
            return "unset"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        return f"`{value}`" if value != "" else "empty"
    if field.default_factory is not msgspec.NODEFAULT:
        if field.name not in FACTORY_DEFAULTS:
            raise UndocumentedSetting(
                f"{ENV_PREFIX}{field.name.upper()}'s default is made by a function: say it "
                f"in words in FACTORY_DEFAULTS of bastion.cli.configdoc"
            )
        return FACTORY_DEFAULTS[field.name]
    return "required"


def _type(field: msgspec.structs.FieldInfo) -> str:
    info = msgspec.inspect.type_info(field.type)
    name = type(info).__name__.removesuffix("Type").lower()
    if isinstance(info, msgspec.inspect.UnionType):
        name = " or ".join(type(t).__name__.removesuffix("Type").lower() for t in info.types)
    bounds = [
        f"{symbol} {getattr(info, attr)}"
        for attr, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
        if getattr(info, attr, None) is not None
    ]
    return name + (f" ({', '.join(bounds)})" if bounds else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _plain(text: str, variable: str) -> str:
    """`text` without its own variable's name, which the table's first column gives."""
    plain = text.removeprefix(f"`{variable}`: ").replace(f" (`{variable}`)", "")
    return plain[:1].upper() + plain[1:]


def _joined(said: list[tuple[str, str]]) -> str:
    """One text when every reader says the same, else each text after the readers saying it."""
    by_text: dict[str, list[str]] = {}
    for reader, text in said:
        by_text.setdefault(text, []).append(reader)
    if len(by_text) == 1:
        return next(iter(by_text))
    return " ".join(f"({', '.join(readers)}) {text}" for text, readers in by_text.items())


Structs = tuple[tuple[type[msgspec.Struct], str], ...]


def variables(settings: Structs = SETTINGS) -> list[Variable]:
    """Every `BASTION_*` variable of `settings`, merged over the structs that read it.

    Raises:
        UndocumentedSetting: a field says nothing of what it changes.
    """
    rows: dict[str, dict[str, list[tuple[str, str]]]] = {}
    types: dict[str, str] = {}
    for struct, reader in settings:
        docstrings = _field_docstrings(struct)
        for field in _own_fields(struct):
            variable = ENV_PREFIX + field.name.upper()
            said = docstrings.get(field.name) or NOTES.get(field.name)
            if said is None:
                raise UndocumentedSetting(
                    f"{struct.__name__}.{field.name} says nothing of what it changes: write a "
                    f"docstring under the field (or a note in NOTES of bastion.cli.configdoc)"
                )
            row = rows.setdefault(variable, {"default": [], "changes": []})
            row["default"].append((reader, _default(field)))
            row["changes"].append((reader, _plain(said, variable)))
            types.setdefault(variable, _type(field))
    found: list[Variable] = []
    for variable, row in sorted(rows.items()):
        readers = [reader for reader, _ in row["default"]]
        if variable.removeprefix(ENV_PREFIX).lower() in CLI_READS:
            readers.append("the `bastion` CLI")
        found.append(
            Variable(
                name=variable,
                default=_joined(row["default"]),
                type=types[variable],
                changes=_joined(row["changes"]),
                readers=tuple(readers),
            )
        )
    return found


def _up_parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="bastion")
    up.add_parser(root.add_subparsers())
    action = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = action.choices["up"]
    return chosen


def _flags() -> Iterator[tuple[str, str, str]]:
    for action in _up_parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        default = "none" if action.default is None else f"`{action.default}`"
        yield ", ".join(f"`{o}`" for o in action.option_strings), default, action.help or ""


HEADER = """\
# Configuration

<!-- Generated by `python -m bastion.cli.configdoc` from the settings structs and `bastion
up`'s flags: edit those (a field's docstring says what it changes), then run it again. -->

Every service reads its settings once, at start, from `BASTION_<FIELD>` variables
(`bastion.shared.settings.load_settings`): a value that does not convert to the field's type
stops the service with a sentence naming the variable. `bastion up` passes its own
environment on to the services and sets some of these itself: the state dir, each
service's NATS user (docs/nats-permissions.md), the front door's address and tokens file,
and the key files of the vault, sandbox and mcp services. Variables read by two services
(`BASTION_SEARCH`, `BASTION_STATE_DIR`) mean the same to both; give them the same value.
"""


def render() -> str:
    """The text of docs/configuration.md.

    Raises:
        UndocumentedSetting: a field says nothing of what it changes.
    """
    lines = [HEADER, "## Variables", ""]
    lines.append("| Variable | Default | Type | What it changes | Read by |")
    lines.append("|---|---|---|---|---|")
    for v in sorted([*variables(), *OUTSIDE_SETTINGS], key=lambda v: v.name):
        cells = (f"`{v.name}`", v.default, v.type, v.changes, ", ".join(v.readers))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += ["", "## Given to command hooks", ""]
    lines.append("The hook runner sets these for a command hook, and no other `BASTION_*`:")
    lines.append("")
    lines.append("| Variable | What it holds |")
    lines.append("|---|---|")
    for name, holds in GIVEN_TO_HOOKS:
        lines.append(f"| `{name}` | {_cell(holds)} |")
    lines += ["", "## `bastion up` flags", ""]
    lines.append("| Flag | Default | What it changes |")
    lines.append("|---|---|---|")
    for names, default, text in _flags():
        lines.append("| " + " | ".join(_cell(c) for c in (names, default, text)) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page (to `--out`, docs/configuration.md of the current directory by default)."""
    parser = argparse.ArgumentParser(prog="python -m bastion.cli.configdoc", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs") / "configuration.md")
    args = parser.parse_args(argv)
    try:
        text = render()
    except BastionError as error:
        sys.stderr.write(f"configdoc: {error.message}\n")
        return 1
    args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
