"""compose.yaml: every service hardened the same way, the sandbox's two exceptions alone,
only egress with a way out; and `docker compose config` accepts it where compose is there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text())
    return loaded


def test_every_container_is_read_only_non_root_without_capabilities_or_new_privileges(
    compose: dict[str, Any],
) -> None:
    for name, service in compose["services"].items():
        assert service["read_only"] is True, name
        assert service["user"] == "10000:10000", name
        assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert "healthcheck" in service, name
        lifted = set(service["security_opt"]) - {"no-new-privileges:true"}
        bubblewrap = name in ("sandbox", "mcp")  # commands; stdio MCP servers
        ours = {"seccomp=deploy/seccomp/bubblewrap.json", "systempaths=unconfined"}
        expected = ours if bubblewrap else set()
        assert lifted == expected, name


def test_the_bubblewrap_seccomp_profile_allows_by_default_and_refuses_the_dangerous_calls() -> None:
    profile = json.loads((REPO / "deploy" / "seccomp" / "bubblewrap.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    (refused,) = profile["syscalls"]
    assert refused["action"] == "SCMP_ACT_ERRNO"
    assert {"bpf", "keyctl", "ptrace", "io_uring_setup", "init_module", "kexec_load"} <= set(
        refused["names"]
    )
    # what bubblewrap itself needs stays allowed
    assert not {"unshare", "clone", "mount", "pivot_root", "umount2"} & set(refused["names"])


def test_only_egress_has_a_way_out_and_the_bus_has_none(compose: dict[str, Any]) -> None:
    assert compose["networks"]["bus"] == {"internal": True}
    outside = [name for name, s in compose["services"].items() if "outside" in s["networks"]]
    assert outside == ["egress"]
    # `front` carries published loopback ports; none of the boundaries that must not reach
    # out are on it.
    front = {name for name, s in compose["services"].items() if "front" in s["networks"]}
    assert front == {"nats", "mcp", "otel"}
    assert compose["services"]["egress-bridge"]["networks"] == ["bus"]
    for name in SERVICES:
        env_files = compose["services"][name]["env_file"]
        assert any(f.endswith(f"/nats/{name}.env") for f in env_files), name


def test_each_service_gets_its_own_nkey_seed_as_a_read_only_file(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        seeds = [v for v in compose["services"][name]["volumes"] if ".nk:" in v]
        assert seeds == [
            f"${{BASTION_GENERATED:-./deploy/generated}}/nats/{name}.nk"
            f":/etc/bastion/nats/{name}.nk:ro"
        ], name
    config = (REPO / "deploy" / "compose" / "config.sh").read_text()
    assert "--seed-dir /etc/bastion/nats" in config


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    if (
        shutil.which("docker") is None
        or subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
    ):
        pytest.skip("no `docker compose` here: the checks above read the file as YAML")
    generated = tmp_path / "generated"
    subprocess.run(
        [sys.executable, "-m", "bastion.cli", "nats", "config", "--out", str(generated / "nats")],
        capture_output=True, check=True,
    )  # fmt: skip
    (generated / "vault.env").write_text("BASTION_VAULT_MASTER_KEY=x\n")
    env = dict(
        os.environ, BASTION_GENERATED=str(generated), BASTION_WORKSPACES=str(tmp_path / "ws")
    )
    checked = subprocess.run(
        ["docker", "compose", "-f", str(REPO / "compose.yaml"), "config", "--quiet"],
        capture_output=True, text=True, env=env, check=False, cwd=REPO,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
