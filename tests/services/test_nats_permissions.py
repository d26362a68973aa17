"""Each service's NATS user may publish and subscribe to exactly its subjects.

A real nats-server runs with the config `bastion nats config` writes; clients connect with
a service's credentials the way a compromised process of that service could.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import msgspec
import nats
import nats.errors
import nats.js.errors
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from nats.aio.client import Client

from bastion.cli.natsserver import free_port, serving
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.proto.policy import PolicyStatus, PolicyStatusQuery
from bastion.proto.sandbox import ExecRequest
from bastion.proto.tasks import TaskRead, TaskStart
from bastion.proto.toolinput import BgOutputInput
from bastion.proto.vault import (
    Lease,
    LeasedValues,
    LeaseRequest,
    RedactionRequest,
    RedactionValues,
    VaultKey,
    VaultKeyQuery,
)
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import connect, request, round_trip
from bastion.shared.codec import decode, encode
from bastion.shared.errors import RemoteError
from bastion.shared.leasing import redaction_context
from bastion.shared.natsconfig import SERVER_FILE, UserCredentials, service_env, write_nats_config
from bastion.shared.natsperms import GRANTS, HOOKS, STREAM_SUBJECTS, permissions
from bastion.shared.sealing import open_sealed, public_bytes
from bastion.shared.service import RequestContext
from bastion.shared.settings import BusSettings, load_settings
from bastion.vault.leasing import lease_context
from bastion.vault.service import vault_service
from bastion.vault.settings import VaultSettings
from tests.helpers import vault as vaulthelp
from tests.helpers.bus import ServiceRunner
from tests.helpers.vault import key_file

pytestmark = pytest.mark.anyio

SESSION = "0123456789abcdef"


@dataclass
class Secured:
    url: str
    users: dict[str, UserCredentials]

    def settings(self, user: str) -> BusSettings:
        return load_settings(BusSettings, self.users[user].env(self.url))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    port = free_port()
    directory = tmp_path / "nats"
    url = f"nats://127.0.0.1:{port}"
    users = write_nats_config(
        directory, listen=f"127.0.0.1:{port}", store_dir=str(directory / "jetstream"), url=url
    )
    with serving(directory / SERVER_FILE, port):
        yield Secured(url, users)


@dataclass
class Connection:
    """A raw connection as one user, with the permission errors the server sent it."""

    client: Client
    errors: list[str] = field(default_factory=list)


@asynccontextmanager
async def as_user(secured: Secured, user: str, inbox_prefix: str = "") -> AsyncIterator[Connection]:
    credentials = secured.users[user]
    errors: list[str] = []

    async def collect(error: Exception) -> None:
        errors.append(str(error).lower())

    client = await nats.connect(
        secured.url,
        nkeys_seed=credentials.seed_file,
        inbox_prefix=inbox_prefix or credentials.inbox_prefix,
        error_cb=collect,
        allow_reconnect=False,
    )
    connection = Connection(client, errors)
    try:
        yield connection
    finally:
        await client.close()


async def refused_subscription(secured: Secured, user: str, subject: str) -> bool:
    """Whether the server refuses `user` a subscription to `subject`."""
    async with as_user(secured, user) as connection:
        await connection.client.subscribe(subject)
        # The server answers a refused SUB with -ERR before it reads what follows, and the
        # client reads that -ERR before the PONG of a round trip sent after the SUB.
        await round_trip(connection.client)
        return any("permissions violation for subscription" in e for e in connection.errors)


@pytest.fixture
def vault_settings(secured: Secured, tmp_path: Path) -> VaultSettings:
    master = key_file(tmp_path)
    return load_settings(
        VaultSettings,
        {
            **service_env(secured.users, "vault", secured.url),
            "BASTION_STATE_DIR": str(tmp_path),
            "BASTION_VAULT_MASTER_KEY_FILE": str(master),
        },
    )


@pytest.fixture
def run_as(secured: Secured) -> ServiceRunner:
    """`async with run_as(setup, settings)`: a service served with its settings' user."""

    @asynccontextmanager
    async def runner(setup: object, settings: BusSettings) -> AsyncIterator[object]:
        async with (
            connect(settings, "test-service") as nc,
            setup(nc, settings) as service,  # type: ignore[operator]
            service.running(nc, drain_timeout_s=5.0),
        ):
            yield service

    return runner


async def test_the_sandbox_service_cannot_read_vault_requests(secured: Secured) -> None:
    assert await refused_subscription(secured, "sandbox", "bastion.v1.vault.>")
    assert await refused_subscription(secured, "sandbox", subjects.VAULT_LEASE)
    assert not await refused_subscription(secured, "sandbox", subjects.SANDBOX_EXEC)


async def test_no_user_but_the_orchestrator_can_subscribe_to_a_sessions_calls(
    secured: Secured,
) -> None:
    for user in GRANTS:
        for subject in (subjects.SESSION_CALL_ANY, subjects.session_call(SESSION), ">"):
            refused = await refused_subscription(secured, user, subject)
            assert refused == (user != "orchestrator" or subject == ">"), (user, subject)


async def test_only_the_front_door_can_read_a_calls_streamed_output_and_the_sandbox_sends_it(
    secured: Secured,
) -> None:
    """A call's output as its command writes it is the front door's alone (the mcp user):
    no other service, hook runner or operator (an agent of `bastion agent run`) reads it."""
    one_call = subjects.call_output(SESSION, "c0ffee")
    for user in GRANTS:
        for subject in (subjects.CALLS_OUTPUT_ANY, one_call, f"{subjects.PREFIX}.calls.>"):
            refused = await refused_subscription(secured, user, subject)
            wide = subject.endswith(">")
            assert refused == (user != "mcp" or wide), (user, subject)
    received: list[bytes] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.data)

    async with as_user(secured, "mcp") as door, as_user(secured, "sandbox") as sandbox:
        await door.client.subscribe(one_call, cb=keep)
        await round_trip(door.client)
        await sandbox.client.publish(one_call, b"chunk")
        await sandbox.client.flush()
        with anyio.fail_after(5):
            while not received:
                await door.client.flush()
                await anyio.sleep(0.01)
    assert received == [b"chunk"] and sandbox.errors == [] and door.errors == []


async def test_a_cancel_is_allowed_exactly_where_a_call_is_and_only_the_orchestrator_tells(
    secured: Secured,
) -> None:
    """Whoever may call in a session may cancel there; `calls.cancel`, which every replica
    acts on, is told by the orchestrator alone (it has checked the session and the call)."""
    for user in GRANTS:
        perms = permissions(user)
        for kind in ("publish", "subscribe"):
            allowed = getattr(perms, kind)
            assert (subjects.SESSION_CALL_ANY in allowed) == (
                subjects.SESSION_CANCEL_ANY in allowed
            ), (user, kind)
        assert (subjects.CALLS_CANCEL in perms.publish) == (user == "orchestrator"), user
    received: list[str] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.subject)

    async with (
        as_user(secured, "sandbox") as sandbox,
        as_user(secured, "mcp") as mcp,
        as_user(secured, "operator") as operator,
    ):
        await sandbox.client.subscribe(subjects.CALLS_CANCEL, cb=keep)
        await round_trip(sandbox.client)
        for forger in (mcp, operator):
            await forger.client.publish(subjects.CALLS_CANCEL, b"x")
            await forger.client.flush()
        with anyio.fail_after(5):
            while not all(
                any("permissions violation for publish" in e for e in forger.errors)
                for forger in (mcp, operator)
            ):
                await mcp.client.flush()
                await anyio.sleep(0.05)
        await sandbox.client.flush()
    assert received == []


async def test_no_user_can_read_another_users_replies(secured: Secured) -> None:
    for user in GRANTS:
        assert await refused_subscription(secured, user, "_INBOX.>"), user
        other = "egress" if user != "egress" else "sandbox"
        assert await refused_subscription(secured, user, f"_INBOX.{other}.>"), user


async def test_a_user_on_the_default_inbox_gets_no_answer(
    secured: Secured, run_as: ServiceRunner
) -> None:
    policy = load_settings(PolicySettings, secured.users["policy"].env(secured.url))
    async with (
        run_as(policy_service, policy),
        as_user(secured, "operator", inbox_prefix="_INBOX") as operator,
    ):
        with pytest.raises(nats.errors.TimeoutError):
            await operator.client.request(
                subjects.POLICY_STATUS, encode(PolicyStatusQuery()), timeout=1
            )
    assert any("permissions violation for subscription" in e for e in operator.errors)


async def test_services_answer_their_callers_with_their_own_credentials(
    secured: Secured, run_as: ServiceRunner, vault_settings: VaultSettings
) -> None:
    policy = load_settings(PolicySettings, secured.users["policy"].env(secured.url))
    async with (
        run_as(policy_service, policy),
        run_as(vault_service, vault_settings),
        connect(secured.settings("operator"), "operator") as operator,
        connect(secured.settings("sandbox"), "sandbox") as sandbox,
    ):
        status = await request(
            operator, subjects.POLICY_STATUS, PolicyStatusQuery(), PolicyStatus, timeout_s=10
        )
        key = await request(operator, subjects.VAULT_KEY, VaultKeyQuery(), VaultKey, timeout_s=10)
        # The sandbox reaches the lease endpoint: a bad key is refused by the vault itself.
        with pytest.raises(RemoteError, match="public key"):
            await request(sandbox, subjects.VAULT_LEASE, lease(b"short"), Lease, timeout_s=10)
    assert isinstance(status, PolicyStatus)
    assert len(key.public_key) == 32


def lease(public_key: bytes) -> LeaseRequest:
    return LeaseRequest(
        tenant="default", session_id=SESSION, call_id="c1", names=("TOKEN",), public_key=public_key
    )


async def test_the_egress_service_cannot_ask_the_vault_for_a_lease(
    secured: Secured, run_as: ServiceRunner, vault_settings: VaultSettings
) -> None:
    async with (
        run_as(vault_service, vault_settings) as vault,
        as_user(secured, "egress") as egress,
    ):
        with pytest.raises(nats.errors.TimeoutError):
            await egress.client.request(subjects.VAULT_LEASE, encode(lease(bytes(32))), timeout=1)
    assert any("permissions violation for publish" in e for e in egress.errors)
    assert vault.endpoints["lease"].requests == 0  # type: ignore[attr-defined]


async def lease_reply_code(secured: Secured, forged: dict[str, str]) -> str:
    """The error code of the vault's answer to the sandbox's lease with a forged header."""
    async with as_user(secured, "sandbox") as sandbox:
        reply = await sandbox.client.request(
            subjects.VAULT_LEASE,
            encode(lease(bytes(32))),
            timeout=10,
            headers={"Nats-Request-Info": json.dumps(forged)},
        )
    return (reply.headers or {}).get("Bastion-Error-Code", "")


async def test_the_vault_knows_its_caller_from_the_server_not_from_the_caller(
    secured: Secured, run_as: ServiceRunner, vault_settings: VaultSettings
) -> None:
    only_mcp = msgspec.structs.replace(vault_settings, vault_lease_callers="BASTION/mcp")
    async with run_as(vault_service, only_mcp):
        # The server replaces the forged header with `BASTION/sandbox`: refused.
        assert await lease_reply_code(secured, {"acc": "BASTION", "user": "mcp"}) == "denied"
    async with run_as(vault_service, vault_settings):
        # By default the sandbox may lease, whatever it claims to be: the lease goes on
        # (and fails only because the tenant has no such secret).
        assert await lease_reply_code(secured, {"acc": "EGRESS", "user": "egress"}) == "not_found"


async def test_a_publish_outside_the_grant_is_dropped_and_reported(secured: Secured) -> None:
    received: list[str] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.subject)

    async with (
        as_user(secured, "orchestrator") as orchestrator,
        as_user(secured, "policy") as policy,
    ):
        await orchestrator.client.subscribe(subjects.SESSION_OPEN, cb=keep)
        await round_trip(orchestrator.client)
        await policy.client.publish(subjects.SESSION_OPEN, b"x")
        await policy.client.publish(subjects.EVENTS_ALL.replace(">", "x.y"), b"x")
        await policy.client.flush()
        with anyio.fail_after(5):
            await orchestrator.client.flush()
            # the server's refusals reach the client's error callback on their own time
            while sum("permissions violation for publish" in e for e in policy.errors) < 2:
                await policy.client.flush()
                await anyio.sleep(0.05)
    assert received == []
    assert sum("permissions violation for publish" in e for e in policy.errors) == 2


async def test_the_operator_reads_state_but_neither_writes_it_nor_leases_secrets(
    secured: Secured,
) -> None:
    async with as_user(secured, "operator") as operator:
        js = operator.client.jetstream()
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.stream_info(f"KV_{subjects.JOURNAL_BUCKET}")  # allowed: it is not there yet
        await operator.client.publish(f"$KV.{subjects.SESSIONS_BUCKET}.x", b"forged")
        await operator.client.publish(subjects.VAULT_LEASE, b"x")
        await operator.client.publish(f"$JS.API.STREAM.DELETE.{subjects.AUDIT_STREAM}", b"")
        await operator.client.flush()
        for _ in range(5):
            if sum("permissions violation for publish" in e for e in operator.errors) == 3:
                break
            await operator.client.flush()
    assert sum("permissions violation for publish" in e for e in operator.errors) == 3


async def test_the_sandbox_leases_a_secret_the_operator_added_across_the_vaults_account(
    secured: Secured, run_as: ServiceRunner, vault_settings: VaultSettings
) -> None:
    recipient = X25519PrivateKey.generate()
    async with (
        run_as(vault_service, vault_settings),
        connect(secured.settings("operator"), "operator") as operator,
        connect(secured.settings("sandbox"), "sandbox") as sandbox,
    ):
        await vaulthelp.add(operator, "DEPLOY_TOKEN", b"a-long-enough-value")
        leased = await vaulthelp.lease(sandbox, public_bytes(recipient), "DEPLOY_TOKEN")
        records = await audit_records(operator)
    context = lease_context("default", vaulthelp.SESSION, "c1")
    opened = decode(open_sealed(recipient, leased.sealed, context), LeasedValues)
    assert opened.values == (("DEPLOY_TOKEN", "a-long-enough-value"),)
    # The read is audited in the main account's stream, by the caller the server stamped.
    assert [r.by.split(" ")[0] for r in records if r.action == "secret_read"] == ["BASTION/sandbox"]


async def test_the_sandbox_gets_a_tenants_redaction_set_and_the_egress_service_cannot(
    secured: Secured, run_as: ServiceRunner, vault_settings: VaultSettings
) -> None:
    recipient = X25519PrivateKey.generate()
    ask = RedactionRequest(session_id=SESSION, tenant="default", public_key=public_bytes(recipient))
    async with (
        run_as(vault_service, vault_settings) as vault,
        connect(secured.settings("operator"), "operator") as operator,
        connect(secured.settings("sandbox"), "sandbox") as sandbox,
        as_user(secured, "egress") as egress,
        as_user(secured, "operator") as raw_operator,
    ):
        await vaulthelp.add(operator, "DEPLOY_TOKEN", b"a-long-enough-value")
        given: RedactionValues = await request(
            sandbox, subjects.VAULT_REDACTION, ask, RedactionValues, timeout_s=10
        )
        for refused in (egress, raw_operator):
            with pytest.raises(nats.errors.TimeoutError):
                await refused.client.request(subjects.VAULT_REDACTION, encode(ask), timeout=1)
            assert any("permissions violation for publish" in e for e in refused.errors)
        records = await audit_records(operator)
        served = vault.endpoints["redaction"].requests  # type: ignore[attr-defined]
    context = redaction_context("default", SESSION)
    opened = decode(open_sealed(recipient, given.sealed, context), LeasedValues)
    assert opened.values == (("DEPLOY_TOKEN", "a-long-enough-value"),)
    assert served == 1
    [read] = [r for r in records if r.tool == "vault.redaction"]
    assert (read.action, read.outcome, read.by.split(" ")[0]) == (
        "secret_read",
        "redaction",
        "BASTION/sandbox",
    )


async def audit_records(client: Client) -> list[AuditRecord]:
    js = client.jetstream()
    info = await js.stream_info(subjects.AUDIT_STREAM)
    return [
        decode((await js.get_msg(subjects.AUDIT_STREAM, seq)).data, AuditRecord)
        for seq in range(info.state.first_seq, info.state.last_seq + 1)
    ]


def test_every_subject_and_bucket_in_proto_has_a_place_in_the_table() -> None:
    """A subject or bucket added to `bastion.proto.subjects` without a grant would be
    refused on the wire: this says which, before anything runs."""
    named = {
        value
        for name, value in vars(subjects).items()
        if name.isupper() and isinstance(value, str) and value.startswith(subjects.PREFIX + ".")
    }
    buckets = {value for name, value in vars(subjects).items() if name.endswith("_BUCKET")}
    granted = {
        subject
        for grant in GRANTS.values()
        for subject in (*grant.serves, *grant.asks, *grant.listens)
    } | set(STREAM_SUBJECTS.values())
    served = [subject for grant in GRANTS.values() for subject in grant.serves]
    owned = {bucket for grant in GRANTS.values() for bucket in grant.buckets}
    assert named - granted == set()
    assert buckets - owned == set()
    assert len(served) == len(set(served)), "a subject is served by one user only"


async def test_only_the_sandbox_service_may_send_a_programs_nested_calls(
    secured: Secured,
) -> None:
    received: list[str] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.subject)

    others = [user for user in GRANTS if user != "sandbox"]
    async with as_user(secured, "orchestrator") as orchestrator:
        await orchestrator.client.subscribe(subjects.SESSION_NESTED_ANY, cb=keep)
        await round_trip(orchestrator.client)
        for user in others:
            async with as_user(secured, user) as other:
                await other.client.publish(subjects.session_nested(SESSION), user.encode())
                with anyio.fail_after(5):
                    while not any("permissions violation for publish" in e for e in other.errors):
                        await other.client.flush()
                        await anyio.sleep(0.05)
        async with as_user(secured, "sandbox") as sandbox:
            await sandbox.client.publish(subjects.session_nested(SESSION), b"sandbox")
            await sandbox.client.flush()
        with anyio.fail_after(5):
            while not received:
                await orchestrator.client.flush()
                await anyio.sleep(0.05)
    assert received == [subjects.session_nested(SESSION)]


async def test_the_sandbox_tells_a_tasks_end_and_the_front_door_hears_it(
    secured: Secured,
) -> None:
    """`events.task_ended.<tenant>`: published by the sandbox service (and the orchestrator,
    which may publish every event), heard by the front door; a user granted neither is
    refused both."""
    ended = subjects.event("task_ended", "acme")
    received: list[bytes] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.data)

    for user in ("policy", "egress", "vault", HOOKS):
        assert await refused_subscription(secured, user, ended), user
        async with as_user(secured, user) as other:
            await other.client.publish(ended, user.encode())
            with anyio.fail_after(5):
                while not any("permissions violation for publish" in e for e in other.errors):
                    await other.client.flush()
                    await anyio.sleep(0.05)
    async with as_user(secured, "mcp") as door, as_user(secured, "sandbox") as sandbox:
        await door.client.subscribe(subjects.event("task_ended", "*"), cb=keep)
        await round_trip(door.client)
        await sandbox.client.publish(ended, b"ended")
        await sandbox.client.flush()
        with anyio.fail_after(5):
            while not received:
                await door.client.flush()
                await anyio.sleep(0.01)
    assert received == [b"ended"] and sandbox.errors == [] and door.errors == []


async def test_only_the_front_door_tells_and_hears_a_revoked_token(secured: Secured) -> None:
    """`frontdoor.tokens.revoked` names a token's hash: told by an mcp replica to every
    other, and no other user may publish or read it (the operator, who reads every event,
    included)."""
    revoked = subjects.FRONTDOOR_TOKEN_REVOKED
    for user in GRANTS:
        perms = permissions(user)
        assert (revoked in perms.publish) == (user == "mcp"), user
        assert (revoked in perms.subscribe) == (user == "mcp"), user
    received: list[bytes] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.data)

    for user in (u for u in GRANTS if u != "mcp"):
        assert await refused_subscription(secured, user, revoked), user
        async with as_user(secured, user) as other:
            await other.client.publish(revoked, user.encode())
            with anyio.fail_after(5):
                while not any("permissions violation for publish" in e for e in other.errors):
                    await other.client.flush()
                    await anyio.sleep(0.05)
    async with as_user(secured, "mcp") as hearing, as_user(secured, "mcp") as telling:
        await hearing.client.subscribe(revoked, cb=keep)
        await round_trip(hearing.client)
        await telling.client.publish(revoked, b"revoked")
        await telling.client.flush()
        with anyio.fail_after(5):
            while not received:
                await hearing.client.flush()
                await anyio.sleep(0.01)
    assert received == [b"revoked"] and hearing.errors == [] and telling.errors == []


async def test_only_the_sandbox_service_serves_and_asks_a_replicas_own_task_subjects(
    secured: Secured,
) -> None:
    """`sandbox.tasks.<replica>.*`, where a request for a task another replica runs is
    forwarded: subscribed and asked by the sandbox user alone."""
    held = subjects.sandbox_task_held("0123456789abcdef", "stop")
    for user in GRANTS:
        assert await refused_subscription(secured, user, held) == (user != "sandbox"), user
    received: list[str] = []

    async def keep(message: nats.aio.msg.Msg) -> None:
        received.append(message.subject)

    async with as_user(secured, "sandbox") as holder:
        await holder.client.subscribe(held, cb=keep)
        await round_trip(holder.client)
        for user in (u for u in GRANTS if u != "sandbox"):
            async with as_user(secured, user) as other:
                await other.client.publish(held, user.encode())
                with anyio.fail_after(5):
                    while not any("permissions violation for publish" in e for e in other.errors):
                        await other.client.flush()
                        await anyio.sleep(0.05)
        async with as_user(secured, "sandbox") as asker:
            await asker.client.publish(held, b"sandbox")
            await asker.client.flush()
        with anyio.fail_after(5):
            while not received:
                await holder.client.flush()
                await anyio.sleep(0.05)
    assert received == [held]


async def test_a_tasks_output_is_forwarded_to_the_replica_running_it_as_the_sandbox_user(
    secured: Secured, run_as: ServiceRunner, tmp_path: Path, workspace: Path
) -> None:
    """Two sandbox replicas connected as the sandbox user: B asks A's own subject for the
    output of A's task, and A's answer comes back to B, on the grants alone."""

    def replica(name: str) -> SandboxSettings:
        env = secured.users["sandbox"].env(secured.url)
        return load_settings(SandboxSettings, {**env, "BASTION_STATE_DIR": str(tmp_path / name)})

    async with (
        run_as(sandbox_service, replica("a")) as a,
        run_as(sandbox_service, replica("b")) as b,
    ):
        begin = TaskStart(
            exec=ExecRequest(session_id=SESSION, workspace=str(workspace), command="echo held")
        )
        started = await a.endpoints["task_start"].handler(begin, RequestContext("", {}))
        read = TaskRead(session_id=SESSION, input=BgOutputInput(id=started.id))
        text = ""
        with anyio.fail_after(30):
            while "held" not in text:
                got = await b.endpoints["task_output"].handler(read, RequestContext("", {}))
                text = got.text
                await anyio.sleep(0.05)
    assert text == "held\n"
