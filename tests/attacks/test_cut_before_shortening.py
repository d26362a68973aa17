"""A value shown whole or in part because a tool numbered, prefixed or shortened its text
before cutting it: a PEM key read with `read_file` (each line numbered), a folded value
found by `search_files` (`path:N:` before each line), a value across the point where a
line, a quoted error line, a command's output or a test run's tail is cut, a skill's
SKILL.md. Each is cut first and shortened after (docs/secrets.md, "Redaction").

Real NATS, vault and sandbox services (bubblewrap for the commands) in this process; the
tenant's values reach the sandbox as every value of the tenant's does
(`vault.redaction`), never leased by these sessions.
"""

from __future__ import annotations

import base64
import os
import secrets
import string
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bastion.mcp.gateway.rendering import MAX_RESULT_CHARS
from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.sandbox import (
    ApplyPatch,
    CodeCheck,
    CodeReport,
    EditFile,
    ExecRequest,
    ExecResult,
    FileRequest,
    FileResult,
    FindSkills,
    ReadFile,
    ReadSkill,
    SearchFiles,
    SkillDocument,
    SkillListing,
)
from bastion.proto.toolinput import (
    ApplyPatchInput,
    EditFileInput,
    ReadFileInput,
    SearchFilesInput,
)
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.keyfiles import read_x25519_key
from bastion.shared.sealing import public_bytes
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.mcp_gateway import add as add_server
from tests.helpers.mcp_gateway import output_text
from tests.helpers.mcp_upstream import SERVERS, apart, stdio_spec
from tests.helpers.session import call, open_session
from tests.helpers.vault import add, key_file, vault_settings

SESSION = "0123456789abcdef"
TENANT = "acme"
OWNER = 1000

PLAIN = "SuperSecretValue42"
"""A short value, as the review's reproductions used."""


def _random(size: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(size))


def _pem() -> str:
    body = base64.b64encode(os.urandom(300)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join(["-----BEGIN PRIVATE KEY-----", *lines, "-----END PRIVATE KEY-----"])


PEM = _pem()
LONG = "LongSecret-" + "Q7x!" * 25
KUBE = _random(2400)


@pytest.fixture
def open_workspace(tmp_path: Path) -> Path:
    """A workspace of the unprivileged owner that every user may write."""
    path = tmp_path / "workspace"
    path.mkdir()
    os.chown(path, OWNER, OWNER)
    path.chmod(0o777)
    return path


def put(workspace: Path, name: str, text: str) -> None:
    path = workspace / name
    path.write_text(text)
    os.chown(path, OWNER, OWNER)


@pytest.fixture
async def services(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path
) -> AsyncIterator[None]:
    """The vault holding the tenant's values, and the sandbox service cutting them."""
    vault = vault_settings(nats_url, key_file(tmp_path / "vault"))
    sandbox = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    async with run_service(vault_service, vault):
        for name, value in (("PLAIN", PLAIN), ("PEM_KEY", PEM), ("LONGSEC", LONG), ("KUBE", KUBE)):
            await add(client, name, value.encode(), tenant=TENANT)
        async with run_service(sandbox_service, sandbox):
            yield


async def files(client: Client, call: FileRequest) -> str:
    answer: FileResult = await request(
        client, subjects.SANDBOX_FILES, call, FileResult, timeout_s=30
    )
    return answer.text


def read(workspace: Path, path: str, offset: int = 1) -> ReadFile:
    return ReadFile(
        session_id=SESSION, workspace=str(workspace), tenant=TENANT,
        input=ReadFileInput(path=path, offset=offset),
    )  # fmt: skip


def search(workspace: Path, pattern: str, glob: str | None = None) -> SearchFiles:
    return SearchFiles(
        session_id=SESSION, workspace=str(workspace), tenant=TENANT,
        input=SearchFilesInput(pattern=pattern, glob=glob, context=0),
    )  # fmt: skip


def pieces(value: str, size: int = 12) -> list[str]:
    """Stretches of `value` long enough not to be there by chance."""
    return [value[i : i + size] for i in range(0, len(value) - size + 1, size)]


def shown(text: str, *values: str, size: int = 12) -> list[str]:
    """The pieces of `values` (and of their base64) that `text` shows."""
    found = []
    for value in values:
        b64 = base64.b64encode(value.encode()).decode()
        found += [piece for piece in pieces(value, size) + pieces(b64, size) if piece in text]
    return found


async def test_a_value_across_numbered_or_prefixed_lines_is_cut_on_every_line(
    client: Client, services: None, open_workspace: Path
) -> None:
    """A PEM key stored as a secret, a value run through `fold`, a long value's base64
    wrapped at 76 columns: `read_file` numbers each line and `search_files` puts
    `path:N:` before it, so the lines were never seen together; each of them is cut."""
    b64 = base64.b64encode(LONG.encode()).decode()
    put(open_workspace, "key.pem", PEM + "\n")
    put(open_workspace, "folded.txt", "\n".join(PLAIN[i : i + 5] for i in range(0, 18, 5)) + "\n")
    put(open_workspace, "wrapped.b64", "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76)))
    answers = [
        await files(client, read(open_workspace, "key.pem")),
        await files(client, read(open_workspace, "folded.txt")),
        await files(client, read(open_workspace, "wrapped.b64")),
        await files(client, search(open_workspace, "[A-Za-z]", "key.pem")),
        await files(client, search(open_workspace, "e", "folded.txt")),
        await files(client, search(open_workspace, "^[A-Za-z0-9+/=!]{3,}$", "*.b64")),
    ]
    pem_lines = PEM.splitlines()
    for answer in answers:
        assert "[secret " in answer, answer
        assert shown(answer, PEM, LONG) == [], answer
        assert not any(line in answer for line in pem_lines[1:-1]), answer
    # Every line keeps its number, the value cut on each line it covers.
    assert answers[0].splitlines()[1] == "     2\t[secret PEM_KEY]", answers[0]
    assert answers[1].splitlines() == [f"{n:6d}\t[secret PLAIN]" for n in range(1, 5)]
    # A read from the middle of the key: the lines shown are still cut.
    middle = await files(client, read(open_workspace, "key.pem", offset=3))
    assert middle.startswith("     3\t[secret PEM_KEY]\n"), middle
    assert not any(line in middle for line in pem_lines[1:-1]), middle


async def test_a_value_across_a_cut_line_is_cut_before_the_line_is_shortened(
    client: Client, services: None, open_workspace: Path
) -> None:
    """`read_file` shows 2,000 characters of a line, `search_files` 300: a value across
    that point, or longer than it (a kubeconfig's key), showed its start uncut."""
    put(
        open_workspace,
        "longline.txt",
        "x" * (2000 - 17) + PLAIN + "yyyy\n"
        + "needle " + "z" * (300 - 7 - 17) + PLAIN + "w\n"
        + "short line\n",
    )  # fmt: skip
    b64 = base64.b64encode(KUBE.encode()).decode()
    put(open_workspace, "kubeconfig", f"users:\n  client-key-data: {b64}\n  token: {KUBE}\n")
    answers = [
        await files(client, read(open_workspace, "longline.txt")),
        await files(client, search(open_workspace, "needle")),
        await files(client, read(open_workspace, "kubeconfig")),
        await files(client, search(open_workspace, "client-key-data|token", "kubeconfig")),
    ]
    for answer in answers:
        assert PLAIN[:8] not in answer, answer
        assert shown(answer, KUBE) == [], answer
    assert "[secret PLAIN]" in answers[0] and "[secret PLAIN]" in answers[1]
    assert "client-key-data: [secret KUBE]" in answers[2]
    assert "token: [secret KUBE]" in answers[3]


async def test_a_large_file_read_line_by_line_is_cut_before_it_is_numbered(
    client: Client, services: None, open_workspace: Path
) -> None:
    """A file over 256 KiB is numbered as it is read, line by line: a key in it, read
    from its middle, is cut on each line too."""
    put(open_workspace, "big.txt", "filler line\n" * 30_000 + PEM + "\nend\n")
    answer = await files(client, read(open_workspace, "big.txt", offset=30_003))
    assert answer.startswith(" 30003\t[secret PEM_KEY]\n"), answer
    assert not any(line in answer for line in PEM.splitlines()[1:-1]), answer


async def test_an_edit_miss_quotes_the_nearest_lines_cut_before_they_are_shortened(
    client: Client, services: None, open_workspace: Path
) -> None:
    """`edit_file`'s miss quotes the file's nearest lines, each cut at 160 characters: a
    value across that point showed its start."""
    put(
        open_workspace,
        "conf.py",
        'a = 1\ntoken = "' + "z" * (160 - 9 - 17) + PLAIN + 'end"\nb = 2\n',
    )
    with pytest.raises(RemoteError) as missed:
        await files(
            client,
            EditFile(
                session_id=SESSION, workspace=str(open_workspace), tenant=TENANT,
                input=EditFileInput(
                    path="conf.py", old_string='token = "' + "z" * 140 + 'QQQ"', new_string="x"
                ),
            ),
        )  # fmt: skip
    assert "the nearest lines of the file are" in missed.value.message
    assert "[secret PLAIN]" in missed.value.message, missed.value.message
    assert PLAIN[:8] not in missed.value.message


async def test_a_patch_miss_quotes_a_keys_lines_cut_before_they_are_numbered(
    client: Client, services: None, open_workspace: Path
) -> None:
    """`apply_patch`'s miss quotes the file's nearest lines, numbered: the lines of a PEM
    key the hunk looks like were never seen together, so were quoted whole."""
    put(open_workspace, "key.pem", PEM + "\n")
    body = PEM.splitlines()
    patch = "\n".join(
        [
            "--- a/key.pem",
            "+++ b/key.pem",
            "@@ -1,3 +1,3 @@",
            " -----BEGIN PRIVATE KEY-----",
            "-" + body[1][:-3] + "zzz",
            "+changed",
            " " + body[2][:-3] + "zzz",
            "",
        ]
    )
    with pytest.raises(RemoteError) as missed:
        await files(
            client,
            ApplyPatch(
                session_id=SESSION, workspace=str(open_workspace), tenant=TENANT,
                input=ApplyPatchInput(patch=patch),
            ),
        )  # fmt: skip
    assert "the nearest lines of the file are" in missed.value.message, missed.value.message
    assert "[secret PEM_KEY]" in missed.value.message
    assert not any(line in missed.value.message for line in body[1:-1]), missed.value.message


async def test_a_value_across_the_gap_in_a_commands_output_is_not_shown_in_halves(
    client: Client, services: None, open_workspace: Path
) -> None:
    """A command's output past its bound keeps its head and its tail: a value across the
    end of the head showed its start, and one across the start of the tail its end."""
    half = 32 * 1024
    program = (
        f"import sys; V='{PLAIN}'; sys.stdout.write('A'*({half}-9) + V + 'B'*600000"
        f" + V + 'C'*({half}-9))"
    )
    result: ExecResult = await request(
        client,
        subjects.SANDBOX_EXEC,
        ExecRequest(
            session_id=SESSION, workspace=str(open_workspace), tenant=TENANT,
            command=f'python3 -c "{program}"',
        ),
        ExecResult,
        timeout_s=60,
    )  # fmt: skip
    assert result.exit_status == 0, result.stderr
    assert "bytes cut ...]" in result.stdout
    assert PLAIN[:9] not in result.stdout and PLAIN[9:] not in result.stdout


async def test_a_test_runs_tail_is_taken_of_its_cut_output(
    client: Client, services: None, open_workspace: Path
) -> None:
    """`run_tests` reports the last 8,000 characters of the run's output: a value across
    where that tail starts showed its end."""
    program = f'import sys; print("A"*100 + "{PLAIN}" + "B"*(8000-17-37)); sys.exit(1)'
    put(open_workspace, "Makefile", f"test:\n\tpython3 -c '{program}'\n")
    report: CodeReport = await request(
        client,
        subjects.SANDBOX_CHECK_CODE,
        CodeCheck(session_id=SESSION, workspace=str(open_workspace), tenant=TENANT, what="tests"),
        CodeReport,
        timeout_s=60,
    )
    assert "--- end of output" in report.text, report.text
    assert "[secret PLAIN]" in report.text and PLAIN[-8:] not in report.text


async def test_a_skills_text_and_its_problems_are_cut(
    client: Client, services: None, tmp_path: Path
) -> None:
    """`skill_read` and `skill_find` answered a SKILL.md, an excerpt of it, or why it is
    not a skill (quoting its front matter) uncut."""
    skills = tmp_path / "skills"
    (skills / "notes").mkdir(parents=True)
    (skills / "broken").mkdir()
    (skills / "notes" / "SKILL.md").write_text(
        f"---\nname: notes\ndescription: deploy notes {PLAIN}\n---\n"
        f"The staging token is {PLAIN} (rotate monthly).\n"
    )
    (skills / "broken" / "SKILL.md").write_text(
        f"---\nname: broken\ndescription: x\nmetadata:\n  bastion-timeout: {PLAIN}\n---\nbody\n"
    )
    where = {"session_id": SESSION, "skills_dir": str(skills), "tenant": TENANT}
    document: SkillDocument = await request(
        client, subjects.SANDBOX_SKILL_READ, ReadSkill(name="notes", **where), SkillDocument,
        timeout_s=30,
    )  # fmt: skip
    found: SkillListing = await request(
        client, subjects.SANDBOX_SKILL_FIND, FindSkills(query="staging token", **where),
        SkillListing, timeout_s=30,
    )  # fmt: skip
    listed: SkillListing = await request(
        client, subjects.SANDBOX_SKILL_FIND, FindSkills(**where), SkillListing, timeout_s=30
    )
    with pytest.raises(RemoteError) as broken:
        await request(
            client, subjects.SANDBOX_SKILL_READ, ReadSkill(name="broken", **where),
            SkillDocument, timeout_s=30,
        )  # fmt: skip
    said = [
        document.text,
        document.description,
        *(entry.excerpt + entry.description for entry in found.skills),
        *(entry.description + entry.problem for entry in listed.skills),
        broken.value.message,
    ]
    assert "The staging token is [secret PLAIN]" in document.text
    assert any("[secret PLAIN]" in entry.problem for entry in listed.skills), listed
    assert all(PLAIN not in text for text in said), said


async def test_an_upstream_servers_long_answer_is_cut_before_it_is_bounded(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """An upstream MCP server's answer is passed on up to 256K characters: one with a value
    across that bound showed the value's start, cut after it was shortened."""
    mcp_key = key_file(tmp_path, "mcp-lease.key")
    public = base64.b64encode(public_bytes(read_x25519_key(mcp_key))).decode()
    mcp_settings = McpSettings(
        nats_url=bus_settings.nats_url,
        http_listen="127.0.0.1:0",
        state_dir=str(tmp_path / "state"),
        mcp_key_file=str(mcp_key),
    )
    vault = vault_settings(bus_settings.nats_url, key_file(tmp_path), vault_lease_keys=public)
    text = "x" * (MAX_RESULT_CHARS - len("kept ") - 9) + PLAIN + "tail"
    async with (
        run_service(vault_service, vault),
        run_service(policy_service, PolicySettings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(mcp_service, mcp_settings),
    ):
        await add(client, "PLAIN", PLAIN.encode())
        await add_server(client, "bad", stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        shown = output_text(await call(client, session.session_id, "bad_target", text=text))
    assert shown.startswith("kept xxx")
    assert PLAIN[:9] not in shown
    assert "the rest of the answer was left out" in shown
