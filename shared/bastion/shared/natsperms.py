"""Who may publish and subscribe to what on the bus: one NATS user per service.

`GRANTS` is the table, one entry per NATS user: the subjects it serves (subscribe, and
answer through `allow_responses`), the subjects it asks or tells (publish), what it
listens to, and the JetStream KV buckets and streams it uses. Everything a server config
needs is derived from it (`permissions`), so a new subject is one line in one entry.
Every user has its own inbox prefix (`_INBOX.<user>`): no user may read another's replies.
A user that serves may publish answers on `bastion.v1.reply.<user>.>`, and each user
subscribes to `bastion.v1.reply.*._INBOX.<user>.>`: an answer sent there is bound by no
response window, so it gets back however long the work ran (`bastion.shared.bus`).

Users live in NATS accounts (`ACCOUNT_OF`): the vault alone in `VAULT`, everyone else in
`BASTION`. Whatever a user asks of a user in another account crosses an export/import pair
(`crossings`), so the server stamps `Nats-Request-Info` with the caller's account (and, for
`SHARED_IDENTITY` subjects, its user) and no client can forge it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bastion.proto import subjects as s

__all__ = [
    "ACCOUNT_OF",
    "GRANTS",
    "HOOKS",
    "MAIN_ACCOUNT",
    "OPERATOR",
    "SHARED_IDENTITY",
    "STREAM_SUBJECTS",
    "Crossing",
    "Grant",
    "Permissions",
    "account_of",
    "accounts",
    "answered_on_inbox",
    "callers",
    "crossings",
    "inbox_prefix",
    "permissions",
]

P = s.PREFIX


@dataclass(frozen=True)
class Grant:
    """What one NATS user needs. Subjects may hold NATS wildcards (`*`, `>`)."""

    serves: tuple[str, ...] = ()
    """Endpoints it answers: subscribed, with the right to publish each request's reply."""
    asks: tuple[str, ...] = ()
    """Subjects it sends requests or events to."""
    listens: tuple[str, ...] = ()
    """Subjects it subscribes to without answering (events)."""
    buckets: tuple[str, ...] = ()
    """JetStream KV buckets it reads, writes and creates."""
    reads_buckets: tuple[str, ...] = ()
    """KV buckets it only reads (the operator looking at state): never writes."""
    writes_streams: tuple[str, ...] = ()
    """Streams it appends to (and creates when missing): never reads, deletes or purges."""
    reads_streams: tuple[str, ...] = ()
    """Streams it reads (info, messages, consumers): never changes."""
    discovery: bool = False
    """May ask `$SRV.*` who runs (operators); every service answers discovery anyway."""


@dataclass(frozen=True)
class Permissions:
    """A user's allow lists, as the server config states them."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool


SANDBOX_ENDPOINTS: Final = (
    s.SANDBOX_EXEC,
    s.SANDBOX_FILES,
    s.SANDBOX_CHECK,
    s.SANDBOX_CHECK_CODE,
    s.SANDBOX_RELEASE,
    s.SANDBOX_SKILL_READ,
    s.SANDBOX_SKILL_FIND,
    s.SANDBOX_SKILL_RUN,
    s.SANDBOX_SKILL_WRITE,
    s.SANDBOX_RESOLVE,
    s.SANDBOX_RUN_CODE,
    s.SANDBOX_TASK_START,
    s.SANDBOX_TASK_LIST,
    s.SANDBOX_TASK_OUTPUT,
    s.SANDBOX_TASK_STOP,
)
MCP_OPERATOR_ENDPOINTS: Final = (s.MCP_ADD, s.MCP_REVIEW, s.MCP_LIST, s.MCP_REMOVE, s.MCP_BROWSE)
VAULT_OPERATOR_ENDPOINTS: Final = (
    s.VAULT_KEY,
    s.VAULT_ADD,
    s.VAULT_LIST,
    s.VAULT_REMOVE,
    s.VAULT_ROTATE,
)
SESSION_ENDPOINTS: Final = (
    s.SESSION_OPEN,
    s.SESSION_CHECK,
    s.SESSION_GET,
    s.SESSION_CLOSE,
    s.SESSION_CALL_ANY,
    s.SESSION_CANCEL_ANY,
    s.SESSION_RUN,
)
APPROVAL_ENDPOINTS: Final = (s.APPROVALS_LIST, s.APPROVALS_ANSWER)
HOOKS_ALL: Final = f"{P}.hooks.>"
MCP_ELICIT_ANY: Final = s.mcp_elicit("*")
MCP_SAMPLE_ANY: Final = s.mcp_sample("*")
FRONTDOOR_TOKEN_ENDPOINTS: Final = (
    s.FRONTDOOR_TOKEN_CREATE,
    s.FRONTDOOR_TOKEN_LIST,
    s.FRONTDOOR_TOKEN_REVOKE,
)

MAIN_ACCOUNT: Final = "BASTION"
ACCOUNT_OF: Final[dict[str, str]] = {"vault": "VAULT"}
"""The account of each user not in `MAIN_ACCOUNT`, which holds every stream others share."""
SHARED_IDENTITY: Final = frozenset({s.VAULT_LEASE, s.VAULT_REDACTION})
"""Imports that stamp the caller's user as well as its account (`share: true`)."""
STREAM_SUBJECTS: Final[dict[str, str]] = {s.AUDIT_STREAM: s.AUDIT_ALL}
"""The subjects each stream keeps (what a writer publishes)."""

OPERATOR: Final = "operator"
"""The user of the `bastion` CLI (and of `bastion up` itself)."""
HOOKS: Final = "hooks"
"""The user of the runner of the operator's command hooks, and of any hook service."""

GRANTS: Final[dict[str, Grant]] = {
    "orchestrator": Grant(
        serves=(*SESSION_ENDPOINTS, *APPROVAL_ENDPOINTS, s.SESSION_NESTED_ANY),
        asks=(
            s.POLICY_DECIDE,
            s.POLICY_CHECK_RULE,
            *SANDBOX_ENDPOINTS,
            s.EGRESS_FETCH,
            s.EGRESS_SEARCH,
            s.MCP_OFFER,
            s.MCP_CALL,
            s.MCP_PREFETCH,
            HOOKS_ALL,
            s.EVENTS_ALL,
            s.CALLS_CANCEL,
        ),
        listens=(s.CALLS_CANCEL,),
        buckets=(
            s.SESSIONS_BUCKET,
            s.JOURNAL_BUCKET,
            s.CALLS_BUCKET,
            s.HOOKS_BUCKET,
            s.APPROVALS_BUCKET,
            s.TURNS_BUCKET,
            s.QUOTA_BUCKET,
        ),
        writes_streams=(s.AUDIT_STREAM,),
    ),
    "policy": Grant(
        serves=(s.POLICY_DECIDE, s.POLICY_CHECK_RULE, s.POLICY_CHECK_PATHS, s.POLICY_STATUS)
    ),
    "sandbox": Grant(
        serves=(*SANDBOX_ENDPOINTS, s.SANDBOX_TASKS_HELD_ANY),
        asks=(
            s.SANDBOX_TASKS_HELD_ANY,  # a request for a task another replica runs, forwarded
            s.VAULT_LEASE,
            s.VAULT_REDACTION,
            s.EGRESS_GRANT,
            s.EGRESS_CONNECTIONS,
            s.POLICY_CHECK_PATHS,
            s.CALLS_OUTPUT_ANY,  # a streamed call's output, as its command writes it
            s.SESSION_NESTED_ANY,  # a run_code program's calls, relayed: no one else may
            s.event("task_ended", "*"),  # a background task that ended on its own
        ),
        listens=(s.CALLS_CANCEL,),
        buckets=(s.SANDBOX_SLOTS_BUCKET, s.SANDBOX_TASKS_BUCKET),
    ),
    "egress": Grant(
        serves=(s.EGRESS_GRANT, s.EGRESS_CONNECTIONS, s.EGRESS_FETCH, s.EGRESS_SEARCH),
        buckets=(s.EGRESS_GRANTS_BUCKET, s.EGRESS_CONNECTIONS_BUCKET),
        writes_streams=(s.AUDIT_STREAM,),
    ),
    "mcp": Grant(
        serves=(
            *MCP_OPERATOR_ENDPOINTS,
            s.MCP_OFFER,
            s.MCP_CALL,
            MCP_ELICIT_ANY,
            MCP_SAMPLE_ANY,
            *FRONTDOOR_TOKEN_ENDPOINTS,
        ),
        asks=(
            s.VAULT_LEASE,
            s.VAULT_REDACTION,
            s.VAULT_LIST,
            s.EGRESS_GRANT,
            s.EGRESS_CONNECTIONS,
            *SESSION_ENDPOINTS,
            *APPROVAL_ENDPOINTS,
            MCP_ELICIT_ANY,
            MCP_SAMPLE_ANY,
            *FRONTDOOR_TOKEN_ENDPOINTS,  # the HTTP API's token routes ask the bus endpoints
            s.FRONTDOOR_TOKEN_REVOKED,  # a revoked token, told to every front door
        ),
        # the front door reads the output of the calls it streams; no other user may
        listens=(
            s.FRONTDOOR_TOKEN_REVOKED,
            s.event("session_closed", "*"),
            s.event("task_ended", "*"),  # told to the MCP client whose session ran the task
            s.CALLS_OUTPUT_ANY,
            s.CALLS_CANCEL,
            s.MCP_PREFETCH,
        ),
        buckets=(
            s.MCP_SERVERS_BUCKET,
            s.FRONTDOOR_TOKENS_BUCKET,
            s.FRONTDOOR_SESSIONS_BUCKET,
            s.FRONTDOOR_SLOTS_BUCKET,
        ),
        reads_buckets=(s.APPROVALS_BUCKET,),  # the front door watches a parked call's answer
        reads_streams=(s.AUDIT_STREAM,),  # a front-door session's record, as a resource
    ),
    "vault": Grant(
        serves=(*VAULT_OPERATOR_ENDPOINTS, s.VAULT_LEASE, s.VAULT_REDACTION),
        buckets=(s.VAULT_KEYS_BUCKET, s.VAULT_SECRETS_BUCKET),
        writes_streams=(s.AUDIT_STREAM,),
    ),
    HOOKS: Grant(serves=(HOOKS_ALL,), buckets=(s.HOOKS_BUCKET,)),
    OPERATOR: Grant(
        asks=(
            *SESSION_ENDPOINTS,
            *APPROVAL_ENDPOINTS,
            *MCP_OPERATOR_ENDPOINTS,
            *VAULT_OPERATOR_ENDPOINTS,
            *FRONTDOOR_TOKEN_ENDPOINTS,
            s.POLICY_STATUS,
        ),
        listens=(s.EVENTS_ALL,),
        reads_buckets=(s.SESSIONS_BUCKET, s.JOURNAL_BUCKET, s.APPROVALS_BUCKET, s.HOOKS_BUCKET),
        reads_streams=(s.AUDIT_STREAM,),
        discovery=True,
    ),
}
"""Each NATS user's grant. `hooks` is the runner of the operator's command hooks."""


def inbox_prefix(user: str) -> str:
    """The inbox prefix `user` connects with (`BASTION_NATS_INBOX_PREFIX`)."""
    return f"_INBOX.{user}"


def _stream_reading(stream: str) -> tuple[str, ...]:
    api = "$JS.API"
    return (
        f"{api}.STREAM.INFO.{stream}",
        f"{api}.STREAM.MSG.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}.>",
        f"{api}.CONSUMER.CREATE.{stream}",
        f"{api}.CONSUMER.CREATE.{stream}.>",
        f"{api}.CONSUMER.DELETE.{stream}.>",
        f"{api}.CONSUMER.INFO.{stream}.>",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.FC.{stream}.>",
        f"$JS.ACK.{stream}.>",
    )


def _stream_creating(stream: str) -> tuple[str, ...]:
    return (f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.CREATE.{stream}")


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def permissions(user: str) -> Permissions:
    """`user`'s publish and subscribe allow lists, derived from its grant."""
    grant = GRANTS[user]
    publish = list(grant.asks)
    for bucket in grant.buckets:
        stream = f"KV_{bucket}"
        publish += [*_stream_creating(stream), *_stream_reading(stream), f"$KV.{bucket}.>"]
    for stream in grant.writes_streams:
        publish += [*_stream_creating(stream), STREAM_SUBJECTS[stream]]
    for stream in (*grant.reads_streams, *(f"KV_{b}" for b in grant.reads_buckets)):
        publish += _stream_reading(stream)
    if grant.discovery:
        publish.append("$SRV.>")
    if grant.serves:
        publish.append(s.reply_subject(user, ">"))  # its answers, to whoever asked
    subscribe = [
        f"{inbox_prefix(user)}.>",
        s.reply_subject("*", f"{inbox_prefix(user)}.>"),
        *grant.serves,
        *grant.listens,
    ]
    if grant.serves:
        subscribe.append("$SRV.>")  # every service is a micro service: it answers discovery
    return Permissions(
        publish=_unique(publish), subscribe=_unique(subscribe), allow_responses=bool(grant.serves)
    )


@dataclass(frozen=True)
class Crossing:
    """`subject`, served in account `exporter`, imported by account `importer`."""

    subject: str
    exporter: str
    importer: str
    share: bool = False
    many_replies: bool = False


def account_of(user: str) -> str:
    return ACCOUNT_OF.get(user, MAIN_ACCOUNT)


def answered_on_inbox() -> frozenset[str]:
    """The subjects served outside the main account: their answer crosses accounts on the
    import's response permission, so it comes on the request's own reply subject (a publish
    on `reply_subject` would stay in the server's account). Each is answered at once."""
    return frozenset(
        subject
        for user, grant in GRANTS.items()
        if account_of(user) != MAIN_ACCOUNT
        for subject in grant.serves
    )


def callers(subject: str) -> tuple[str, ...]:
    """Who may ask `subject`, as the server stamps it: `ACCOUNT/user`."""
    return tuple(f"{account_of(u)}/{u}" for u, grant in GRANTS.items() if subject in grant.asks)


def accounts() -> dict[str, tuple[str, ...]]:
    """Each account's users, the main account first."""
    found: dict[str, list[str]] = {MAIN_ACCOUNT: []}
    for user in GRANTS:
        found.setdefault(account_of(user), []).append(user)
    return {name: tuple(users) for name, users in found.items()}


def crossings() -> tuple[Crossing, ...]:
    """Every subject a user asks of another account, every shared stream a user of another
    account writes, and each other account's discovery (`$SRV.>`) seen from the main one."""
    served = {subject: account_of(user) for user, g in GRANTS.items() for subject in g.serves}
    found: list[Crossing] = []
    for user, grant in GRANTS.items():
        mine = account_of(user)
        for subject in grant.asks:
            home = served.get(subject, mine)
            if home != mine:
                found.append(Crossing(subject, home, mine, share=subject in SHARED_IDENTITY))
        if mine != MAIN_ACCOUNT:
            for stream in grant.writes_streams:
                for subject in (STREAM_SUBJECTS[stream], *_stream_creating(stream)):
                    found.append(Crossing(subject, MAIN_ACCOUNT, mine))
    for account in accounts():
        if account != MAIN_ACCOUNT:
            found.append(Crossing("$SRV.>", account, MAIN_ACCOUNT, many_replies=True))
    return tuple(dict.fromkeys(found))
