"""`skill_run`: a skill's own scripts, run in the session's sandbox as the skill declares."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import RunSkill
from bastion.proto.tools import ToolOutput
from bastion.sandbox.skillrun import interpreter, skill_script
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.errors import InvalidInput, NotFound
from tests.helpers.bus import Plane
from tests.helpers.owners import owned
from tests.helpers.session import call, session_of
from tests.helpers.skills import skill_session
from tests.helpers.vault import add

COUNT_PY = """#!/usr/bin/env python3
import os, sys
print("cwd", os.getcwd())
print("args", sys.argv[1:])
try:
    open("/skill/x", "w")
except OSError as error:
    print("skill read-only", error.errno)
print("token", os.environ.get("SKILL_TOKEN", "none"))
"""

HELLO_SH = """echo "sh in $(pwd) with $# args: $1|$2"
touch made-by-sh
"""


def _skill(root: Path, name: str, front: str, files: dict[str, str]) -> None:
    (root / name / "scripts").mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\nname: {name}\n{front}---\nRun the scripts.\n")
    for path, text in files.items():
        (root / name / path).write_text(text)


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    scripts = {"scripts/count.py": COUNT_PY, "scripts/hello.sh": HELLO_SH}
    _skill(root, "plain", "", scripts)
    _skill(root, "secretive", "metadata:\n  bastion-secrets: SKILL_TOKEN\n", scripts)
    _skill(
        root,
        "online",
        "metadata:\n  bastion-network: pypi.org, *.pythonhosted.org api.example:8443\n"
        "  bastion-timeout: 5\n",
        scripts,
    )
    (tmp_path / "outside.py").write_text("print('outside')\n")
    (root / "plain" / "scripts" / "out.py").symlink_to(tmp_path / "outside.py")
    return root


async def test_a_python_and_a_shell_script_run_with_their_args_in_the_workspace(
    client: Client, plane_with_vault: Plane, workspace: Path, skills_dir: Path
) -> None:
    tricky = "$(touch pwned); `touch pwned2`"
    async with plane_with_vault():
        sid = await skill_session(client, workspace, skills_dir)
        py = await call(
            client, sid, "skill_run", name="plain", script="scripts/count.py", args=["a b", tricky]
        )
        sh = await call(client, sid, "skill_run", name="plain", script="scripts/hello.sh",
                        args=["one", "two"])  # fmt: skip
    assert isinstance(py, ToolOutput) and py.text.startswith("exit status 0"), py
    assert "cwd /workspace" in py.text
    assert f"args ['a b', {tricky!r}]" in py.text
    assert "skill read-only 30" in py.text  # EROFS
    assert "token none" in py.text  # a skill that declares no secrets gets none
    assert py.effect == "write" and py.decision.outcome == "allow"
    assert isinstance(sh, ToolOutput) and "sh in /workspace with 2 args: one|two" in sh.text
    assert (workspace / "made-by-sh").exists()
    assert not (workspace / "pwned").exists() and not (workspace / "pwned2").exists()


@pytest.mark.parametrize(
    ("script", "error", "words"),
    [
        ("../secretive/scripts/count.py", InvalidInput, "without `..`"),
        ("scripts/../../plain/scripts/count.py", InvalidInput, "without `..`"),
        ("/etc/passwd", InvalidInput, "not a path inside the skill"),
        ("scripts/out.py", InvalidInput, "leads out of skill"),
        ("scripts/missing.py", NotFound, "has no script"),
    ],
)
def test_a_script_that_climbs_links_out_or_is_missing_is_refused(
    skills_dir: Path, script: str, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        skill_script(skills_dir, "plain", script)


def test_the_interpreter_comes_from_the_hash_bang_line_else_the_extension(tmp_path: Path) -> None:
    cases = {
        "a.py": ("#!/usr/bin/env python3\n", ("/usr/bin/env", "python3")),
        "b.py": ("print(1)\n", ("python3",)),
        "c.sh": ("echo\n", ("sh",)),
        "d.js": ("1\n", ("node",)),
        "e.rb": ("1\n", ("ruby",)),
        "f.pl": ("1\n", ("perl",)),
        "g": ("#!/bin/bash -eu\n", ("/bin/bash", "-eu")),
    }
    for name, (text, program) in cases.items():
        (tmp_path / name).write_text(text)
        assert interpreter(tmp_path / name) == program, name
    (tmp_path / "h.txt").write_text("x\n")
    with pytest.raises(InvalidInput, match="no `#!` line"):
        interpreter(tmp_path / "h.txt")


async def test_a_refused_script_is_an_answer_through_the_plane(
    client: Client, plane_with_vault: Plane, workspace: Path, skills_dir: Path
) -> None:
    async with plane_with_vault():
        sid = await skill_session(client, workspace, skills_dir)
        up = await call(client, sid, "skill_run", name="plain", script="../online/SKILL.md")
        missing = await call(client, sid, "skill_run", name="nosuch", script="scripts/x.py")
    assert isinstance(up, ErrorReply) and "without `..`" in up.message
    assert isinstance(missing, ErrorReply) and missing.code == "not_found"


async def test_a_skills_declared_secrets_are_leased_for_its_call_and_redacted(
    client: Client, plane_with_vault: Plane, workspace: Path, skills_dir: Path
) -> None:
    value = "tok-" + secrets.token_urlsafe(24)
    async with plane_with_vault():
        await add(client, "SKILL_TOKEN", value.encode())
        sid = await skill_session(client, workspace, skills_dir)
        given = await call(client, sid, "skill_run", name="secretive", script="scripts/count.py")
        not_given = await call(client, sid, "skill_run", name="plain", script="scripts/count.py")
    assert isinstance(given, ToolOutput), given
    assert "token [secret SKILL_TOKEN]" in given.text and value not in given.text
    assert isinstance(not_given, ToolOutput) and "token none" in not_given.text


async def test_a_skill_declaring_network_asks_for_the_declared_network_and_taints(
    client: Client, plane_with_vault: Plane, workspace: Path, skills_dir: Path
) -> None:
    seen: list[RunSkill] = []

    async def record(msg: Msg) -> None:
        seen.append(decode(msg.data, RunSkill))

    async with plane_with_vault():
        await client.subscribe(subjects.SANDBOX_SKILL_RUN, cb=record)
        sid = await skill_session(client, workspace, skills_dir, autonomy="L5", network="declared")
        ran = await call(client, sid, "skill_run", name="online", script="scripts/hello.sh")
        plain = await call(client, sid, "skill_run", name="plain", script="scripts/hello.sh")
        info = await session_of(client, sid)
        l3 = await skill_session(client, workspace, skills_dir, autonomy="L3", network="declared")
        refused = await call(client, l3, "skill_run", name="online", script="scripts/hello.sh")
    assert len(seen) == 2, (ran, plain)
    online, offline = seen[0].exec, seen[1].exec
    assert online.network == "declared"
    assert online.declared_hosts == ("pypi.org", "*.pythonhosted.org", "api.example:8443")
    assert online.limits.wall_s == 5.0 and online.secrets == () and online.call_id == ""
    assert offline.network == "none" and offline.declared_hosts == ()
    # Whatever the sandbox made of `declared`, the result came from outside: taint.
    assert isinstance(ran, (ToolOutput, ErrorReply))
    assert info.tainted_until is not None
    assert isinstance(plain, ToolOutput) and plain.effect == "write"
    assert isinstance(refused, ErrorReply) and refused.code == "denied"


async def test_a_skill_declaring_network_gets_none_in_a_session_without_network(
    client: Client, plane_with_vault: Plane, workspace: Path, skills_dir: Path
) -> None:
    """`--network none` is no network for every command, a skill's script included: what it
    declares is granted only where the session's sandbox has a network."""
    seen: list[RunSkill] = []

    async def record(msg: Msg) -> None:
        seen.append(decode(msg.data, RunSkill))

    async with plane_with_vault():
        await client.subscribe(subjects.SANDBOX_SKILL_RUN, cb=record)
        sid = await skill_session(client, workspace, skills_dir, autonomy="L3", network="none")
        ran = await call(client, sid, "skill_run", name="online", script="scripts/hello.sh")
        info = await session_of(client, sid)
    assert len(seen) == 1, ran
    assert seen[0].exec.network == "none" and seen[0].exec.declared_hosts == ()
    # It reached nothing outside, so it is a write (run at L3) and taints nothing.
    assert isinstance(ran, ToolOutput) and ran.effect == "write", ran
    assert ran.text.startswith("exit status 0"), ran.text
    assert info.tainted_until is None


async def test_nothing_the_agent_left_in_the_workspace_runs_beside_a_skills_secrets(
    client: Client, plane_with_vault: Plane, workspace: Path, skills_dir: Path
) -> None:
    """HOME is the workspace for commands, so Python loaded a `.pth` the agent wrote under
    `.local/lib/.../site-packages` into a skill's script, next to its leased secret. A
    skill's script has its own empty HOME (`/tmp`), no user site-packages and no working
    directory first on Python's path (`python3 -m json.tool` imported a `json/` the agent
    wrote)."""
    site = workspace / ".local/lib/python3.11/site-packages"
    site.mkdir(parents=True)
    (site / "zz.pth").write_text("import os; open('/workspace/pth-ran', 'w').write('ran')\n")
    (workspace / ".curlrc").write_text("trace-ascii /workspace/curl-trace\n")
    owned(workspace)
    probe = (
        'import os, site; print("home", os.environ["HOME"], "user-site", site.ENABLE_USER_SITE)\n'
    )
    (skills_dir / "plain" / "scripts" / "probe.py").write_text(probe)
    (workspace / "json").mkdir()
    (workspace / "json" / "__init__.py").write_text("open('/workspace/json-ran', 'w')\n")
    owned(workspace)
    (skills_dir / "plain" / "scripts" / "fmt.sh").write_text(
        "#!/bin/sh\necho '{}' | python3 -m json.tool\n"
    )
    async with plane_with_vault():
        sid = await skill_session(client, workspace, skills_dir)
        ran = await call(client, sid, "skill_run", name="plain", script="scripts/probe.py")
        assert isinstance(ran, ToolOutput) and ran.text.startswith("exit status 0"), ran
        assert "home /tmp user-site False" in ran.text
        assert not (workspace / "pth-ran").exists()
        formatted = await call(client, sid, "skill_run", name="plain", script="scripts/fmt.sh")
        assert isinstance(formatted, ToolOutput) and "{}" in formatted.text, formatted
        assert not (workspace / "json-ran").exists()  # `-m` imports no module of the workspace
        # A command is the agent's own code anyway: it keeps the workspace as HOME.
        shell = await call(
            client, sid, "shell", command="python3 -c \"import os; print(os.environ['HOME'])\""
        )
    assert isinstance(shell, ToolOutput) and "/workspace" in shell.text
