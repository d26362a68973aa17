"""Connecting to NATS, and the typed request helper every caller on the bus uses.

A request names the caller's inbox in the `Bastion-Reply-Inbox` header; the service
answers on `bastion.v1.reply.<its user>.<inbox>`, which only the caller may read and which
no response window bounds, so an answer gets back however long the work ran (a command
of an hour, an upstream tool waiting for a person). Answers on the request's own reply
subject are taken too: the "no responders" status, the vault's across accounts
(`natsperms.answered_on_inbox`), and services that do not read the header. A client's
answers all come to two subscriptions it makes at its first request (its inbox prefix and
the reply subjects under it, each request one token below them), so a request costs its
publish and its answer, not four subscription changes too. A JetStream publish
(`send_stored`) is answered there as well: its acknowledgement is a future awaited when
the caller chooses, so several records can be sent at once and acknowledged together.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry.trace import SpanKind

from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.shared.codec import decode, encode
from bastion.shared.errors import InvalidInput, NoResponders, RemoteError, Timeout, Unavailable
from bastion.shared.natsperms import answered_on_inbox
from bastion.shared.nkeyseeds import check_seed_file
from bastion.shared.settings import BusSettings
from bastion.shared.telemetry import headers_with_context, messaging_attributes, tracer, tracing

__all__ = [
    "Client",
    "CredentialsRefused",
    "Requester",
    "Stored",
    "TooLarge",
    "answer",
    "ask_jetstream",
    "connect",
    "decode_jetstream_answer",
    "request",
    "round_trip",
    "send_stored",
]

T = TypeVar("T")

_SESSION_ID = re.compile(r"(?<![^.])[0-9a-f]{16}(?![^.])")
"""A session id: 16 hex digits that are a whole token of a subject."""
_ON_INBOX = answered_on_inbox()
_NO_RESPONDERS = "503"
_INBOX = re.compile(r"_INBOX(\.[A-Za-z0-9_\-]+)+")
"""An inbox a caller may name for its answer: subject tokens, no wildcards."""

logger = logging.getLogger(__name__)


async def _log_error(error: Exception) -> None:
    logger.warning("nats connection error", extra={"error_type": type(error).__name__})


async def round_trip(client: Client) -> None:
    """Return once the server has read everything `client` sent before this call (a
    subscription made, a message published), so another connection may count on it.

    One `flush()` does not prove it: nats-py writes the flush's PING straight to the
    socket, ahead of the commands still waiting in its buffer for its flusher task, and
    the server can answer the PONG before it has read them (a fresh subscription then
    misses a message another connection publishes right after). The flusher writes that
    buffer while the first round trip waits, so the second one comes after it."""
    await client.flush()
    await client.flush()


@asynccontextmanager
async def connect(settings: BusSettings, name: str) -> AsyncIterator[Client]:
    """A NATS connection named `name`, drained (pending replies flushed) on exit.

    Raises:
        Unavailable: NATS cannot be reached at `settings.nats_url`.
        CredentialsRefused: NATS refused the credentials (a wrong seed, a stale password).
        InvalidInput: `BASTION_NATS_NKEY_SEED_FILE` is unreadable or holds no seed.
    """
    options: dict[str, Any] = {
        "servers": [settings.nats_url],
        "name": name,
        "inbox_prefix": settings.nats_inbox_prefix,
        "connect_timeout": 2,
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.5,
        "drain_timeout": settings.drain_timeout_s,
        "error_cb": _log_error,
    }
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    if settings.nats_nkey_seed_file:
        check_seed_file(settings.nats_nkey_seed_file)
        options["nkeys_seed"] = settings.nats_nkey_seed_file
    if settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password or ""
    client = Client()
    try:
        await client.connect(allow_reconnect=False, **options)
    except (OSError, nats.errors.Error, TimeoutError) as error:
        # nats-py leaves the socket of a refused connect open.
        with contextlib.suppress(nats.errors.Error, OSError):
            await client.close()
        if _refused(error):
            raise CredentialsRefused(
                f"NATS at {settings.nats_url} refused this process's credentials"
                f"{_whose(settings)}: they are not the server's (an old or another config): "
                "regenerate both with `bastion nats config` (or restart `bastion up`) and "
                "restart NATS and the services with the new files"
            ) from None
        raise Unavailable(
            f"cannot reach NATS at {settings.nats_url} ({type(error).__name__}): "
            "start Bastion with `bastion up`, or point --nats / BASTION_NATS_URL at a running one"
        ) from None
    # Reconnection, forever, is wanted once connected (a NATS restart must not kill a
    # service); but nats-py retries even the first connect up to max_reconnect_attempts, and
    # a first connect that fails should fail fast with the sentence above: hence two steps.
    client.options["allow_reconnect"] = True
    client.options["max_reconnect_attempts"] = -1
    try:
        yield client
    finally:
        if not client.is_closed:
            try:
                await client.drain()
            except (nats.errors.Error, TimeoutError):
                await client.close()


class CredentialsRefused(Unavailable):
    """NATS answered, but refused the credentials this process connects with."""


def _refused(error: BaseException) -> bool:
    """Whether the server said no to the credentials (at connect, nats-py raises its
    `-ERR 'Authorization Violation'` as a plain `Error`)."""
    return isinstance(error, nats.errors.AuthorizationError) or (
        isinstance(error, nats.errors.Error) and "authorization violation" in str(error).lower()
    )


def _whose(settings: BusSettings) -> str:
    given = settings.nats_nkey_seed_file or settings.nats_creds or settings.nats_user
    return f" ({given})" if given else ""


def _without_ids(subject: str) -> str:
    """`subject` with each session id (16 hex digits) as `*`: a span's name stays one of a
    few, whatever the session (`send bastion.v1.session.*.call`)."""
    return _SESSION_ID.sub("*", subject)


class TooLarge(InvalidInput):
    """A message is more than the bus carries in one message (the server's max_payload)."""


def _too_large(subject: str, size: int, limit: int) -> TooLarge:
    return TooLarge(
        f"the message to {_without_ids(subject)} is {size} bytes, more than the {limit} bytes "
        "the bus carries in one message (the NATS server's max_payload): send less at once, "
        "e.g. write a large file in parts (write_file the first part, then append the rest "
        "with a shell command or edit_file), or have a command in the sandbox produce it"
    )


class _Handing(asyncio.Queue[Msg]):
    """A subscription's queue that hands each message to `take` as nats-py's read loop puts
    it, instead of keeping it for a task of the subscription to get: an answer wakes the
    request waiting for it straight away, one turn of the event loop sooner, with no task
    per subscription. `take` must not wait or raise. It stays empty, so a drain of the
    subscription finds nothing left."""

    def __init__(self, subscription: Subscription, take: Callable[[Msg], None]) -> None:
        super().__init__()
        self._subscription = subscription
        self._take = take

    def put_nowait(self, item: Msg) -> None:
        # nats-py counts a message's bytes as pending until its consumer takes it
        self._subscription._pending_size -= len(item.data)
        self._take(item)


def _handing(subscription: Subscription, take: Callable[[Msg], None]) -> Subscription:
    """`subscription` (made without a callback: no task) handing each message to `take`."""
    subscription._pending_queue = _Handing(subscription, take)
    return subscription


class _Answers:
    """Where one client's requests are answered: `<prefix>.<n>` (its inbox) and
    `bastion.v1.reply.<responder>.<prefix>.<n>`, each taken by one wildcard subscription
    made at its first request; the request `n` waits on its own future, set as its answer
    is read (`_Handing`)."""

    def __init__(self, client: Client) -> None:
        self.prefix = client.new_inbox()
        self._numbers = itertools.count()
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._listening: list[Subscription] = []
        self._starting = asyncio.Lock()

    def _take(self, msg: Msg) -> None:
        answer = self._waiting.pop(msg.subject.rsplit(".", 1)[1], None)
        if answer is not None and not answer.done():
            answer.set_result(msg)

    async def waiting(self, client: Client) -> tuple[str, asyncio.Future[Msg]]:
        """A new request's inbox and the future its answer comes to (`forget` it after)."""
        if not self._listening:
            async with self._starting:
                if not self._listening:
                    inboxes = f"{self.prefix}.*"
                    replies = subjects.reply_subject("*", inboxes)
                    self._listening = [
                        _handing(await client.subscribe(inboxes), self._take),
                        _handing(await client.subscribe(replies), self._take),
                    ]
        number = str(next(self._numbers))
        answer: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        return f"{self.prefix}.{number}", answer

    def forget(self, inbox: str) -> None:
        self._waiting.pop(inbox.rsplit(".", 1)[1], None)


_answers: weakref.WeakKeyDictionary[Client, _Answers] = weakref.WeakKeyDictionary()


def _expire(answer: asyncio.Future[Msg]) -> None:
    if not answer.done():
        answer.set_exception(nats.errors.TimeoutError())


class _Sent:
    """A message sent with its answer still to come, on the client's inbox `inbox`."""

    def __init__(self, answers: _Answers, inbox: str, answer: asyncio.Future[Msg]) -> None:
        self._answers = answers
        self.inbox = inbox
        self._answer = answer

    async def answer(self, timeout_s: float) -> Msg:
        """The answer, within `timeout_s` from now; the inbox is forgotten after.

        Raises the nats-py errors: `TimeoutError` (none came), `NoRespondersError`.
        """
        # A timer on the future itself: no task or waiter of `asyncio.wait_for` per request.
        timer = asyncio.get_running_loop().call_later(timeout_s, _expire, self._answer)
        try:
            msg = await self._answer
        finally:
            timer.cancel()
            self._answers.forget(self.inbox)
        if msg.headers and msg.headers.get("Status") == _NO_RESPONDERS and not msg.data:
            raise nats.errors.NoRespondersError
        return msg

    def forget(self) -> None:
        """Stop waiting for the answer (it is dropped if it comes)."""
        self._answer.cancel()
        self._answers.forget(self.inbox)


async def _send(
    client: Client, subject: str, payload: bytes, headers: dict[str, str] | None, *, named: bool
) -> _Sent:
    """Publish `payload` with the client's next inbox as its reply subject (named in the
    `Bastion-Reply-Inbox` header too when `named`, unless the subject answers on it)."""
    answers = _answers.get(client)
    if answers is None:
        answers = _answers[client] = _Answers(client)
    inbox, answer = await answers.waiting(client)
    if named and subject not in _ON_INBOX:
        headers = {**(headers or {}), subjects.REPLY_INBOX_HEADER: inbox}
    try:
        await client.publish(subject, payload, reply=inbox, headers=headers)
    except BaseException:
        answers.forget(inbox)
        raise
    return _Sent(answers, inbox, answer)


async def _exchange(
    client: Client, subject: str, payload: bytes, headers: dict[str, str], timeout_s: float
) -> Msg:
    """Send a request and wait for its answer, on the caller's reply subject or its inbox.

    Raises the nats-py errors (`NoRespondersError`, `TimeoutError`, …) for `request` to
    turn into Bastion's.
    """
    sent = await _send(client, subject, payload, headers, named=True)
    return await sent.answer(timeout_s)


async def ask_jetstream(client: Client, subject: str, payload: bytes, *, timeout_s: float) -> Msg:
    """The answer to a bare request (no header added), on the client's answer inbox: a
    JetStream API request as nats-py's `Client.request` makes one, without its per-request
    subscription token, task or `wait_for`.

    Raises the nats-py errors of a request (`TimeoutError`, `NoRespondersError`, …).
    """
    sent = await _send(client, subject, payload, None, named=False)
    return await sent.answer(timeout_s)


def decode_jetstream_answer(decoder: msgspec.json.Decoder[T], data: bytes, what: str) -> T:
    """A JetStream API answer (`what`, for the error) decoded with `decoder`.

    Raises:
        nats.js.errors.APIError: it is not the JSON `decoder` reads.
    """
    try:
        return decoder.decode(data)
    except msgspec.DecodeError:
        raise nats.js.errors.APIError(description=f"{what} is not JSON") from None


class _PubAck(msgspec.Struct):
    seq: int = 0
    error: dict[str, Any] | None = None


_pub_ack = msgspec.json.Decoder(_PubAck)


class Stored:
    """A message published to a JetStream stream, its acknowledgement still to come."""

    def __init__(self, sent: _Sent, deadline: float) -> None:
        self._sent = sent
        self._deadline = deadline

    async def sequence(self) -> int:
        """The stream's sequence of the message once it acknowledged it, as nats-py's
        `JetStreamContext.publish` returns it and with its errors.

        Raises:
            nats.errors.TimeoutError: no acknowledgement by the deadline `send_stored` set.
            nats.js.errors.NoStreamResponseError: no stream takes the subject.
            nats.js.errors.APIError: the stream refused it (a subclass by its code; a
                compare-and-set that lost its race has `err_code` 10071 or 10164).
        """
        remaining = self._deadline - asyncio.get_running_loop().time()
        try:
            msg = await self._sent.answer(max(remaining, 0.0))
        except nats.errors.NoRespondersError:
            raise nats.js.errors.NoStreamResponseError from None
        ack = decode_jetstream_answer(_pub_ack, msg.data, "the acknowledgement")
        if ack.error is not None:
            raise nats.js.errors.APIError.from_error(ack.error)
        return ack.seq

    def forget(self) -> None:
        """Stop waiting for the acknowledgement: the message is stored or not regardless."""
        self._sent.forget()


async def send_stored(
    client: Client,
    subject: str,
    payload: bytes,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float,
) -> Stored:
    """Publish `payload` to the JetStream stream of `subject` now (in order with what this
    client sends next); its acknowledgement is awaited later with `Stored.sequence` (or
    dropped with `Stored.forget`), within `timeout_s` from now. The message, its headers
    and its acknowledgement are those of nats-py's `JetStreamContext.publish`, without a
    task, timer or JSON parser of nats-py's request per message.

    Raises the nats-py errors of a publish (`ConnectionClosedError`, …).
    """
    sent = await _send(client, subject, payload, headers, named=False)
    return Stored(sent, asyncio.get_running_loop().time() + timeout_s)


async def answer(
    client: Client, msg: Msg, data: bytes, responder: str, headers: dict[str, str] | None = None
) -> None:
    """Answer the request `msg` as the NATS user `responder`: on the caller's reply subject
    when it named its inbox (no response window bounds it), else on `msg.reply`."""
    inbox = (msg.headers or {}).get(subjects.REPLY_INBOX_HEADER, "")
    if _INBOX.fullmatch(inbox):
        await client.publish(subjects.reply_subject(responder, inbox), data, headers=headers)
    elif msg.reply:
        await client.publish(msg.reply, data, headers=headers)


async def request(
    client: Client,
    subject: str,
    message: object,
    reply_type: Any,
    *,
    timeout_s: float,
) -> Any:
    """Send `message` to `subject` and return its reply decoded as `reply_type`.

    It is a PRODUCER span, `send <subject>` (session ids as `*`; OpenTelemetry's messaging
    conventions), whose context travels in the `traceparent` header (and `tracestate`), so
    the service's `process` span is its child.

    Raises:
        TooLarge: `message` is more than the bus carries; nothing was sent.
        NoResponders: nothing is subscribed to `subject` (an `Unavailable`).
        Timeout: no reply within `timeout_s`.
        RemoteError: the service answered with a typed error.
        BadRequest: the reply is not a `reply_type` (a service of another version).
    """
    if not tracing():  # no span to make: the current one's context goes with the request
        return await _request(client, subject, message, reply_type, timeout_s)
    template = _without_ids(subject)
    with tracer().start_as_current_span(
        f"send {template}",
        kind=SpanKind.PRODUCER,
        attributes=messaging_attributes("send", subject, template),
    ):
        return await _request(client, subject, message, reply_type, timeout_s)


_ANSWERED_BY: Final = {
    "session": "orchestrator",
    "calls": "orchestrator",
    "approvals": "orchestrator",
    "policy": "policy",
    "sandbox": "sandbox",
    "egress": "egress",
    "mcp": "mcp",
    "frontdoor": "mcp",
    "vault": "vault",
    "hooks": "hooks",
}


def _what_to_check(subject: str) -> str:
    """The sentence after a request's time-out: which service took it and did not answer."""
    parts = subject.split(".")
    area = parts[2] if len(parts) > 2 and f"{parts[0]}.{parts[1]}" == subjects.PREFIX else ""
    service = _ANSWERED_BY.get(area)
    if service is None:
        return "whoever answers it took the request but did not answer in time"
    return (
        f"the {service} service took the request but did not answer in time; "
        f"`bastion status` shows whether it is up, and its log why it is slow"
    )


async def _request(
    client: Client, subject: str, message: object, reply_type: Any, timeout_s: float
) -> Any:
    """`request`'s exchange and its errors, in the caller's span."""
    payload, headers = encode(message), headers_with_context()
    # The headers travel too; what is left for them is the server's to judge.
    if len(payload) > client.max_payload:
        raise _too_large(subject, len(payload), client.max_payload)
    try:
        try:
            reply = await _exchange(client, subject, payload, headers, timeout_s)
        except nats.errors.NoRespondersError:
            # A subscriber that settled its subscription with a bare flush (not
            # `round_trip`) may have had its PONG before the server read its SUB, so
            # the first request after it can find nobody. A round trip of our own gives
            # its SUB time to land; ask once more before calling the service absent.
            await client.flush(timeout=max(1, int(timeout_s)))
            reply = await _exchange(client, subject, payload, headers, timeout_s)
    except nats.errors.MaxPayloadError:
        raise _too_large(subject, len(payload), client.max_payload) from None
    except nats.errors.NoRespondersError:
        raise NoResponders(f"no service answers on {subject}: is it running?") from None
    except nats.errors.TimeoutError:
        raise Timeout(
            f"no answer on {subject} within {timeout_s:g} s: {_what_to_check(subject)}"
        ) from None
    except nats.errors.ConnectionClosedError:
        raise Unavailable("the connection to NATS is closed") from None
    answer = decode(reply.data, reply_type | ErrorReply)
    if isinstance(answer, ErrorReply):
        raise RemoteError(answer.code, answer.message)
    return answer


@dataclass(frozen=True)
class Requester:
    """`request` for a caller that asks with one client and one timeout (held, or a base
    of the caller's own dataclass): `await bus.ask(subject, message, ReplyType)`."""

    client: Client
    timeout_s: float

    async def ask(self, subject: str, message: object, reply_type: type[T]) -> T:
        """The reply to `message`; it raises what `request` raises."""
        reply: T = await request(
            self.client, subject, message, reply_type, timeout_s=self.timeout_s
        )
        return reply
