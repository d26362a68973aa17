"""Hand-written parsers misread, and agent-given patterns stalled: each attack is answered
correctly (refused with its sentence, or read as the standard reads it) and in bounded work."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream

from bastion.egress.resolver import FixedResolver
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.mcp.gateway.upstream import (
    UpstreamHandlers,
    asks_for_secret,
    host_and_port,
    open_upstream,
)
from bastion.policy.preapproval import covers, parse_rule
from bastion.proto import subjects
from bastion.proto.egress import EgressGrant, FetchedPage, GrantRequest
from bastion.proto.mcp import ElicitAnswer, ElicitQuestion
from bastion.proto.sandbox import (
    EditFile,
    FileRequest,
    FileResult,
    FindFiles,
    ReadSkill,
    SearchFiles,
    SkillDocument,
)
from bastion.proto.stubs import FetchRequest
from bastion.proto.toolinput import EditFileInput, FindFilesInput, SearchFilesInput
from bastion.sandbox.skills import read_skill
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.patterns import MAX_GLOBSTARS, pattern_matches
from bastion.shared.skillmatter import MAX_FRONT_MATTER, InvalidSkillFile
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import ask_proxy, basic, guard_network, web_server
from tests.helpers.loopback import serving_on_loopback
from tests.helpers.mcp_upstream import SERVERS, stdio_spec
from tests.helpers.sandbox import Host

SESSION = "0123456789abcdef"
RESOLVER = FixedResolver(
    {
        "public.test": ["127.0.0.1"],
        "b.com": ["127.0.0.1"],
        "fass.de": ["127.0.0.1"],
        "xn--fa-hia.de": ["127.0.0.1"],
    }
)


@dataclass
class Proxy:
    """The egress service's proxy, with a grant that may reach `public.test` on `port`."""

    client: Client

    async def auth(self, *hosts: str) -> tuple[str, str]:
        grant: EgressGrant = await request(
            self.client,
            subjects.EGRESS_GRANT,
            GrantRequest(session_id=SESSION, tenant="acme", hosts=hosts, any_public_host=not hosts),
            EgressGrant,
            timeout_s=10,
        )
        return grant.proxy, basic(grant.grant_id, grant.secret)

    async def fetch(self, url: str) -> FetchedPage:
        page: FetchedPage = await request(
            self.client,
            subjects.EGRESS_FETCH,
            FetchRequest(session_id=SESSION, url=url, format="markdown", tenant="acme"),
            FetchedPage,
            timeout_s=30,
        )
        return page


@pytest.fixture
async def proxy(
    client: Client, run_service: ServiceRunner, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Proxy]:
    """The egress service, loopback allowed (the test's web server is there), guarded so a
    connection off loopback fails the test instead of leaving the machine."""
    off_loopback = guard_network(monkeypatch)
    settings = EgressSettings(
        nats_url=nats_url, egress_allow_ranges="127.0.0.0/8", egress_fetch_timeout_s=10
    )
    async with run_service(egress_service(RESOLVER), settings):
        yield Proxy(client)
    assert off_loopback == []


# Finding 10: IPv6 forms that embed IPv4 (SIIT, IPv4-compatible) and site-local fec0::/10.
EMBEDDED = [
    ("::a9fe:a9fe", "link-local (cloud metadata) address 169.254.169.254 (embedded in"),
    ("::ffff:0:a9fe:a9fe", "link-local (cloud metadata) address 169.254.169.254 (embedded in"),
    ("::ffff:0:a00:1", "private address 10.0.0.1 (embedded in ::ffff:0:a00:1)"),
    ("::10.0.0.1", "private address 10.0.0.1 (embedded in ::a00:1)"),
    ("fec0::1", "site-local (deprecated private) address fec0::1"),
]


@pytest.mark.parametrize(("address", "reason"), EMBEDDED)
async def test_an_ipv6_form_embedding_a_private_ipv4_is_refused(
    proxy: Proxy, address: str, reason: str
) -> None:
    url, auth = await proxy.auth()
    answer = await ask_proxy(
        url, f"CONNECT [{address}]:443 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n"
    )
    assert answer.status == 403, answer.body
    assert answer.headers["x-bastion-refused"].startswith(reason)


# Finding 13: request heads the HTTP/1.1 grammar refuses are refused, not forwarded.
SMUGGLED = [
    "X: a\nHost: b.com\r\n",  # a bare LF: the origin may read a second Host header
    "Bad Name: x\r\n",  # a header name with a space
    "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",  # both: a smuggling pair
    "Content-Length: 5\r\nContent-Length: 6\r\n",  # two lengths that disagree
]


@pytest.mark.parametrize("extra", SMUGGLED)
async def test_a_malformed_plain_request_head_is_refused_with_400(proxy: Proxy, extra: str) -> None:
    async with web_server() as server:
        url, auth = await proxy.auth(f"public.test:{server.port}")
        answer = await ask_proxy(
            url,
            f"GET http://public.test:{server.port}/ HTTP/1.1\r\n"
            f"Host: public.test:{server.port}\r\nProxy-Authorization: {auth}\r\n{extra}\r\n",
        )
    assert answer.status == 400, answer.body
    assert answer.body.decode().strip()
    assert server.seen == []


@pytest.mark.parametrize("extra", ["Bad Name: x\r\n", "X: a\x00b\r\n"])
async def test_a_malformed_connect_head_is_refused_with_400(proxy: Proxy, extra: str) -> None:
    async with web_server() as server:
        url, auth = await proxy.auth(f"public.test:{server.port}")
        answer = await ask_proxy(
            url,
            f"CONNECT public.test:{server.port} HTTP/1.1\r\n"
            f"Proxy-Authorization: {auth}\r\n{extra}\r\n",
        )
    assert answer.status == 400, answer.body
    assert server.seen == []


# Review (minor): a head in bare LF line endings was never answered; the reader waited
# for CRLFCRLF until the client gave up.


@pytest.mark.parametrize("connect", [False, True])
async def test_a_bare_lf_request_head_is_refused_with_400_and_a_sentence(
    proxy: Proxy, connect: bool
) -> None:
    async with web_server() as server:
        url, auth = await proxy.auth(f"public.test:{server.port}")
        target = f"public.test:{server.port}"
        line = f"CONNECT {target}" if connect else f"GET http://{target}/"
        answer = await ask_proxy(
            url, f"{line} HTTP/1.1\nHost: {target}\nProxy-Authorization: {auth}\n\n"
        )
    assert answer.status == 400, answer.body
    assert "CRLF" in answer.body.decode()
    assert server.seen == []


async def test_a_well_formed_plain_request_is_still_forwarded(proxy: Proxy) -> None:
    async with web_server() as server:
        url, auth = await proxy.auth(f"public.test:{server.port}")
        answer = await ask_proxy(
            url,
            f"GET http://public.test:{server.port}/plain HTTP/1.1\r\n"
            f"Host: public.test:{server.port}\r\nProxy-Authorization: {auth}\r\n"
            "Accept: text/plain\r\n\r\n",
        )
    assert answer.status == 200
    assert answer.body == b"just text\n"
    assert server.seen == [("GET /plain HTTP/1.1", f"public.test:{server.port}")]


# Finding 15: host names are compared in IDNA 2008 (UTS 46), not Python's IDNA 2003 codec.
async def test_fetch_url_of_an_eszett_name_asks_for_that_name(proxy: Proxy) -> None:
    async with web_server() as server:
        page = await proxy.fetch(f"http://faß.de:{server.port}/plain")
    assert page.text == "just text\n"
    assert server.seen == [("GET /plain HTTP/1.1", f"xn--fa-hia.de:{server.port}")]


async def test_fetch_url_of_a_name_with_a_stray_joiner_is_refused_with_a_sentence(
    proxy: Proxy,
) -> None:
    async with web_server() as server:
        with pytest.raises(RemoteError) as refused:
            await proxy.fetch(f"http://fa\u200dss.de:{server.port}/plain")
    assert "not a valid internationalized name" in refused.value.message
    assert server.seen == []


def test_an_upstream_mcp_url_is_compared_by_its_idna_2008_name() -> None:
    assert host_and_port("https://faß.de/mcp") == ("xn--fa-hia.de", 443)


# Finding 14: SKILL.md front matter is YAML, read by PyYAML's safe loader, never misread.
def _skill(tmp_path: Path, front: str) -> SkillDocument:
    (tmp_path / "skills" / "demo").mkdir(parents=True)
    (tmp_path / "skills" / "demo" / "SKILL.md").write_text(f"---\n{front}---\nbody\n")
    return read_skill(
        tmp_path / "skills",
        ReadSkill(session_id=SESSION, skills_dir=str(tmp_path / "skills"), name="demo"),
    )


def test_valid_yaml_front_matter_is_read_as_yaml_reads_it(tmp_path: Path) -> None:
    skill = _skill(
        tmp_path,
        "name: demo\ndescription: >-\n  Looks things\n  up.\nallowed-tools: [Read, Grep]\n"
        "metadata:\n  bastion-network: api.example.com  # the API\n"
        "  bastion-secrets:\n    - API_TOKEN\n  bastion-timeout: 30\n",
    )
    assert skill.description == "Looks things up."
    assert skill.allowed_tools == ("Read", "Grep")
    assert skill.network == ("api.example.com",)
    assert skill.secrets == ("API_TOKEN",)
    assert skill.timeout_s == 30


@pytest.mark.parametrize(
    ("front", "line", "problem"),
    [
        ("name: demo\nallowed-tools: &rules Bash\nx: *rules\n", 3, "anchor or alias"),
        ("allowed-tools: Read\nallowed-tools: Bash\n", 3, "gives the key 'allowed-tools' twice"),
        ("allowed-tools:\n  shell: yes\n", 2, "is not a string or a list of strings"),
        ("metadata:\n  bastion-network: [pypi.org, [a, b]]\n", 3, "not a string or a list"),
        ("name: [demo]\n", 2, "is a list, not a string"),
    ],
)
def test_a_misshapen_front_matter_is_refused_naming_the_skill_and_line(
    tmp_path: Path, front: str, line: int, problem: str
) -> None:
    with pytest.raises(InvalidSkillFile) as refused:
        _skill(tmp_path, front)
    assert "skill 'demo'" in refused.value.message
    assert f"line {line}" in refused.value.message
    assert problem in refused.value.message


def test_a_front_matter_past_the_size_cap_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidSkillFile, match="longer than"):
        _skill(tmp_path, "description: " + "x" * MAX_FRONT_MATTER + "\n")


def test_a_declared_internationalized_host_is_kept_in_its_idna_2008_form(tmp_path: Path) -> None:
    skill = _skill(tmp_path, "metadata:\n  bastion-network: faß.de *.bücher.de:8443\n")
    assert skill.network == ("xn--fa-hia.de", "*.xn--bcher-kva.de:8443")


# Finding 16: agent-given globs and edits are answered in bounded work (each test has a
# pytest timeout: the old code stalled for minutes on the same input, uncancellably).
def _owned(path: Path) -> None:
    """The workspace's tree owned by an unprivileged user, as a sandbox's would be."""
    for entry in [path, *path.rglob("*")]:
        os.chown(entry, 1000, 1000)


async def _file_tool(client: Client, message: FileRequest) -> str:
    result: FileResult = await request(
        client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=60
    )
    return result.text


@pytest.mark.timeout(60)
async def test_a_glob_of_many_globstars_on_a_deep_tree_is_answered(
    client: Client, sandbox: None, host: Host
) -> None:
    deep = host.workspace.joinpath(*["a"] * 40)
    deep.mkdir(parents=True)
    (deep / "c").write_text("x\n")
    _owned(host.workspace)
    workspace = str(host.workspace)
    answer = await _file_tool(
        client,
        FindFiles(
            session_id=SESSION, workspace=workspace, input=FindFilesInput(pattern="**/a/" * 8 + "b")
        ),
    )
    assert answer.startswith("no files match")
    with pytest.raises(RemoteError) as refused:
        await _file_tool(
            client,
            FindFiles(
                session_id=SESSION,
                workspace=workspace,
                input=FindFilesInput(pattern="**/" * 12 + "b"),
            ),
        )
    assert refused.value.code == "invalid_input"
    assert f"more than {MAX_GLOBSTARS}" in refused.value.message


@pytest.mark.timeout(60)
async def test_a_glob_of_many_stars_is_answered(client: Client, sandbox: None, host: Host) -> None:
    (host.workspace / ("a" * 200)).write_text("needle\n")
    _owned(host.workspace)
    answer = await _file_tool(
        client,
        SearchFiles(
            session_id=SESSION,
            workspace=str(host.workspace),
            input=SearchFilesInput(pattern="needle", glob="*a" * 30 + "*b"),
        ),
    )
    assert answer == "no lines match needle"


@pytest.mark.timeout(60)
def test_a_hook_or_pre_approval_pattern_of_many_stars_is_answered() -> None:
    stars = "*a" * 30 + "*b"
    assert not pattern_matches([stars], "a" * 5000)
    rule = parse_rule(f"Write({stars})")
    assert not covers(rule, "write_file", "a" * 200)
    assert covers(rule, "write_file", "a" * 60 + "b")


@pytest.mark.timeout(60)
async def test_an_edit_file_miss_on_a_long_file_is_answered_with_the_nearest_lines(
    client: Client, sandbox: None, host: Host
) -> None:
    lines = [f"value_{i} = compute(alpha, {i})" for i in range(200_000)]
    (host.workspace / "big.py").write_text("\n".join(lines) + "\n")
    _owned(host.workspace)
    wanted = "\n".join(line.replace("compute", "computed") for line in lines[150_000:150_012])
    with pytest.raises(RemoteError) as refused:
        await _file_tool(
            client,
            EditFile(
                session_id=SESSION,
                workspace=str(host.workspace),
                input=EditFileInput(path="big.py", old_string=wanted, new_string="x = 1"),
            ),
        )
    assert "the nearest lines of the file are" in refused.value.message
    assert "150001\tvalue_150000 = compute(alpha, 150000)" in refused.value.message


ROW = b"<div><p>Some <b>text</b> and <a href='/x'>a link</a>.</p><ul><li>one</li></ul></div>"
BIG_PAGE = b"<html><body><h1>Big</h1>" + ROW * (5 * 1024 * 1024 // len(ROW) - 1) + b"</body></html>"
SHAPED_PAGE = (
    b"<html><head><script>evil()</script></head><body><h2>Code</h2>"
    b"<pre>def f():\n    return 1\n</pre><table><tr><th>a</th><th>b</th></tr>"
    b"<tr><td>1</td><td>2</td></tr></table></body></html>"
)


@asynccontextmanager
async def _page_server(body: bytes) -> AsyncIterator[tuple[int, anyio.Event]]:
    """A loopback server answering every request with the HTML `body`; the event is set
    once the client has read a whole answer and closed (the page is then converted)."""
    sent = anyio.Event()

    async def handle(stream: SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}"
            await stream.send(f"{head}\r\nConnection: close\r\n\r\n".encode() + body)
            try:
                while True:
                    await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                sent.set()

    async with serving_on_loopback(handle) as port:
        yield port, sent


@pytest.mark.timeout(60)
async def test_converting_a_large_page_leaves_the_egress_service_answering(
    proxy: Proxy,
) -> None:
    answered: list[str] = []
    async with _page_server(BIG_PAGE) as (port, sent), anyio.create_task_group() as group:

        async def fetch() -> None:
            page = await proxy.fetch(f"http://public.test:{port}/")
            assert page.text.startswith("# Big")
            answered.append("fetch")

        group.start_soon(fetch)
        await sent.wait()
        await proxy.auth("example.org")
        answered.append("grant")
    assert answered == ["grant", "fetch"]


async def test_a_page_keeps_its_pre_blocks_and_tables(proxy: Proxy) -> None:
    async with _page_server(SHAPED_PAGE) as (port, _):
        page = await proxy.fetch(f"http://public.test:{port}/")
    assert "evil()" not in page.text
    assert "## Code" in page.text
    assert "```\ndef f():\n    return 1\n```" in page.text
    assert "| a | b |\n| --- | --- |\n| 1 | 2 |" in page.text


# Review F7: a form asking for a secret in its message, or under a field name the word
# list missed, was relayed.

SECRET_FORMS = [
    ("Enter your GitHub password below", "answer", {"type": "string"}),
    ("Sign in", "passwords", {"type": "string"}),
    ("Sign in", "access_code", {"type": "string"}),
    ("Anmelden", "kennwort", {"type": "string"}),
    ("Iniciar sesión", "contraseña", {"type": "string"}),
    ("Connexion", "value", {"type": "string", "title": "Mot de passe"}),
    ("Deploy", "privkey", {"type": "string"}),
    ("Deploy", "sshKey", {"type": "string"}),
    ("Deploy", "APIKey", {"type": "string"}),
    ("Deploy", "api-key", {"type": "string"}),
    ("Sign in", "mfa", {"type": "string", "description": "The 6-digit code from your app"}),
    ("Sign in", "code", {"type": "string", "description": "Your one-time code"}),
    ("Sign in", "otpCode", {"type": "string"}),
    ("Enter the 2FA code we sent you", "value", {"type": "string"}),
    ("Sign in", "verificationCode", {"type": "string"}),
    ("Sign in", "pin", {"type": "string"}),
    ("Wallet", "words", {"type": "string", "title": "Seed phrase"}),
    ("Account", "value", {"type": "string", "title": "Recovery codes"}),
    ("Cloud", "clientSecret", {"type": "string"}),
    ("Cloud", "credentials", {"type": "string"}),
    ("Paste your access token to continue", "value", {"type": "string"}),
]


@pytest.mark.parametrize(("message", "name", "field"), SECRET_FORMS)
def test_a_form_asking_for_a_secret_anywhere_is_recognised(
    message: str, name: str, field: dict[str, str]
) -> None:
    assert asks_for_secret({"type": "object", "properties": {name: field}}, message)


ORDINARY_FORMS = [
    ("What should I call you?", "name", {"type": "string", "title": "Your name"}),
    ("Choose a colour", "colour", {"type": "string", "enum": ["red", "teal"]}),
    ("Confirm that I may delete build/", "confirm", {"type": "boolean"}),
    ("How many pineapples?", "count", {"type": "integer"}),
    ("Pick a keyword to search for", "keyword", {"type": "string"}),
    ("Where should the file go?", "path", {"type": "string", "description": "A path"}),
]


@pytest.mark.parametrize(("message", "name", "field"), ORDINARY_FORMS)
def test_an_ordinary_form_is_still_relayed(message: str, name: str, field: dict[str, str]) -> None:
    assert not asks_for_secret({"type": "object", "properties": {name: field}}, message)


async def test_a_form_asking_for_a_password_in_its_message_is_declined_unasked(
    tmp_path: Path,
) -> None:
    asked: list[ElicitQuestion] = []

    async def elicit(question: ElicitQuestion) -> ElicitAnswer:
        asked.append(question)
        return ElicitAnswer(action="accept", content={"answer": "hunter2"})

    handlers = UpstreamHandlers(elicit=elicit, session_id=SESSION)
    spec = stdio_spec(SERVERS / "misbehaving.py", tmp_path)
    async with open_upstream(
        spec, server="bad", values={}, handlers=handlers, prefer_protocol="2025-11-25"
    ) as bad:
        result = await bad.call_tool("ask_in_message", {}, timeout_s=10)
    assert [part.text for part in result.content if part.type == "text"] == ["message: decline"]
    assert asked == []
