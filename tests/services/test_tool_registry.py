"""The tool registry, the catalogue a model is shown, the policy's tables and the sandbox's
dispatch all name the same built-in tools, each with the same input and effect."""

from __future__ import annotations

import typing

from bastion.orchestrator.catalogue import catalogue_for, input_type_of, shell_effect
from bastion.orchestrator.execute import FILE_REQUESTS, run_file_tool
from bastion.orchestrator.registry import REGISTRY, UPSTREAM, route_of
from bastion.policy.tools import GROUPS, HOST_TOOLS, PATH_TOOLS, SHELL_TOOL, SKILL_RUN_TOOL
from bastion.proto.sandbox import FileRequest
from bastion.proto.session import ToolSpec
from bastion.proto.toolinput import BUILTIN_TOOLS
from bastion.sandbox.service import _FILE_TOOLS


def everything(network: str = "none") -> tuple[ToolSpec, ...]:
    return catalogue_for(
        workspace="/w", shell=True, network=network, skills_dir="/s", web=True, search=True
    )


def test_the_registry_the_catalogue_and_the_proto_table_name_the_same_tools_in_order() -> None:
    assert list(REGISTRY) == list(BUILTIN_TOOLS)
    assert [t.name for t in everything()] == list(REGISTRY)


def test_each_tool_is_shown_with_the_effect_and_input_the_proto_table_gives_it() -> None:
    for network in ("none", "host"):
        for tool in everything(network):
            builtin = BUILTIN_TOOLS[tool.name]
            assert tool.effect == (builtin.effect or shell_effect(network)), tool.name
            assert input_type_of(tool) is builtin.input_type
            assert REGISTRY[tool.name].effect == builtin.effect


def test_the_policys_tool_names_are_the_registrys() -> None:
    files = {name for name, d in REGISTRY.items() if d.route.run is run_file_tool}
    assert files == PATH_TOOLS
    assert {SHELL_TOOL, SKILL_RUN_TOOL, *HOST_TOOLS} <= set(REGISTRY)
    programs = {name for name, d in REGISTRY.items() if d.effect is None}
    assert programs | {SKILL_RUN_TOOL} <= GROUPS["runs_commands"]
    writers = {n for n, d in REGISTRY.items() if d.effect == "write" and d.journaled}
    assert writers == GROUPS["writes_paths"]


def test_each_file_tool_has_a_wire_request_carrying_its_input_and_a_sandbox_function() -> None:
    inputs = {BUILTIN_TOOLS[name].input_type for name in PATH_TOOLS}
    assert set(FILE_REQUESTS) == inputs == set(_FILE_TOOLS)
    for given, wire in FILE_REQUESTS.items():
        assert wire in typing.get_args(FileRequest)
        assert typing.get_type_hints(wire)["input"] is given


def test_a_call_goes_where_its_tool_is_routed() -> None:
    services = {name: d.route.service for name, d in REGISTRY.items()}
    assert services["shell"] == services["read_file"] == services["skill_write"] == "sandbox"
    assert services["fetch_url"] == services["web_search"] == "egress"
    for tool in everything():
        assert route_of(tool) is REGISTRY[tool.name].route
    upstream = ToolSpec(
        name="notes_add", effect="write", description="", server="notes", upstream="add"
    )
    assert route_of(upstream) is UPSTREAM and UPSTREAM.service == "mcp"


def test_run_code_is_offered_with_a_shell_of_the_bwrap_backend_and_runs_on_the_sandbox() -> None:
    docker = "docker:img@sha256:" + "0" * 64
    offered = {
        (shell, sandbox): "run_code"
        in {
            t.name
            for t in catalogue_for(workspace="/w", shell=shell, network="none", sandbox=sandbox)
        }
        for shell in (True, False)
        for sandbox in ("bwrap", docker)
    }
    assert offered == {
        (True, "bwrap"): True,
        (False, "bwrap"): False,
        (True, docker): False,
        (False, docker): False,
    }
    assert REGISTRY["run_code"].route.service == "sandbox"
    assert REGISTRY["run_code"].effect == "read" and not REGISTRY["run_code"].journaled
    assert "run_code" in GROUPS["runs_commands"]
