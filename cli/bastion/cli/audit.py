"""`bastion audit tail|show`: read the audit log, the whole of it or one session's."""

from __future__ import annotations

import argparse
import sys

import anyio
import msgspec
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from bastion.cli.common import add_location_options, add_output_option, add_verbs, bus, fail
from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.codec import decode

__all__ = ["add_parser", "format_record"]


def format_record(record: AuditRecord) -> str:
    """One record as a line: time, session, action, tool, outcome, rule (who acted, the
    run_code call a program's call was made in), summary."""
    fields = [
        record.at.strftime("%Y-%m-%d %H:%M:%S"),
        record.session_id,
        record.action,
        record.tool or "-",
        record.outcome or "-",
        record.rule or "-",
    ]
    line = " ".join(fields)
    if record.by:
        line += f" by {record.by}"
    if record.parent_call_id:
        line += f" in run_code {record.parent_call_id}"
    return f"{line}  {record.summary}" if record.summary else line


def _show(record: AuditRecord, output: str) -> None:
    text = msgspec.json.encode(record).decode() if output == "json" else format_record(record)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def _stored(js: JetStreamContext, subject: str, first_seq: int, output: str) -> int:
    """Print every stored record on `subject` from `first_seq`; the next sequence to read."""
    seq = max(first_seq, 1)
    while True:
        try:
            msg = await js.get_msg(subjects.AUDIT_STREAM, seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return seq
        assert msg.data is not None and msg.seq is not None
        _show(decode(msg.data, AuditRecord), output)
        seq = msg.seq + 1


async def _stream_info_or_fail(js: JetStreamContext) -> int | None:
    """The last sequence of the audit stream, or None (said) if there is no audit log."""
    try:
        info = await js.stream_info(subjects.AUDIT_STREAM)
    except nats.js.errors.NotFoundError:
        fail("there is no audit log yet: it is created when the orchestrator starts")
        return None
    return info.state.last_seq or 0


async def _tail(args: argparse.Namespace) -> int:
    async with bus(args, "bastion-audit") as client:
        js = client.jetstream()
        last = await _stream_info_or_fail(js)
        if last is None:
            return 1
        following = await _stored(js, subjects.AUDIT_ALL, last - args.n + 1, args.output)
        if not args.follow:
            return 0
        received, arrivals = anyio.create_memory_object_stream[Msg](1024)

        async def deliver(msg: Msg) -> None:
            await received.send(msg)

        subscription = await js.subscribe(
            subjects.AUDIT_ALL,
            cb=deliver,
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=following
            ),
        )
        try:
            async for msg in arrivals:
                _show(decode(msg.data, AuditRecord), args.output)
        finally:
            await subscription.unsubscribe()
    return 0


async def _session(args: argparse.Namespace) -> int:
    async with bus(args, "bastion-audit") as client:
        js = client.jetstream()
        if await _stream_info_or_fail(js) is None:
            return 1
        subject = f"{subjects.PREFIX}.audit.*.{args.session}"
        if await _stored(js, subject, 1, args.output) == 1:
            return fail(
                f"the audit log has no record of session {args.session}: check the id "
                "(`bastion audit tail` shows the sessions recorded lately)"
            )
    return 0


def tail(args: argparse.Namespace) -> int:
    if args.n < 0:
        return fail("-n must be 0 or more", 2)
    try:
        return anyio.run(_tail, args)
    except KeyboardInterrupt:
        return 0


def show(args: argparse.Namespace) -> int:
    if len(args.session) != 16 or not all(c in "0123456789abcdef" for c in args.session):
        return fail(f"{args.session!r} is not a session id (16 lowercase hex digits)", 2)
    return anyio.run(_session, args)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "audit", help="read the audit log of decisions, calls, results")
    tail_parser = verbs.add_parser("tail", help="the latest records, and new ones with --follow")
    tail_parser.add_argument("-n", type=int, default=20, help="how many (default 20)")
    tail_parser.add_argument("--follow", action="store_true", help="keep printing new records")
    show_parser = verbs.add_parser("show", help="every record of one session, in order")
    show_parser.add_argument("session", help="the session id")
    for parser in (tail_parser, show_parser):
        add_output_option(parser)
        add_location_options(parser)
    tail_parser.set_defaults(handler=tail)
    show_parser.set_defaults(handler=show)
