"""Quotas counted across replicas on one NATS: a tenant's calls per second shared by every
orchestrator instance, and its running sandboxes by every sandbox instance, a dead one's
slots coming back once their lease ends."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from bastion.orchestrator.quota import QuotaUnavailable, RateLimited, TenantRates
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.sharedslots import SharedSlots, SlotsUnavailable
from bastion.sandbox.tenants import TenantBusy
from bastion.shared.bus import Client, connect
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.sandbox import HELD, run_as_tenant, wait_for_file
from tests.helpers.session import call, open_session


class Clock:
    """A clock the test moves by hand (seconds since the epoch, as the quotas read it)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def clients(bus_settings: BusSettings, count: int) -> AsyncIterator[list[Client]]:
    """`count` connections of their own, as `count` replicas would have."""
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(connect(bus_settings, f"replica-{k}"))
            for k in range(count)
        ]


async def drive(rates: list[TenantRates], calls_each: int) -> tuple[int, int]:
    """`calls_each` calls of tenant acme through each instance at once, as fast as they go:
    how many were let through and how many refused."""
    counts = {"ok": 0, "limited": 0}

    async def through(instance: TenantRates) -> None:
        for _ in range(calls_each):
            try:
                await instance.take("acme")
            except RateLimited as refused:
                assert "retry in" in refused.message
                counts["limited"] += 1
            else:
                counts["ok"] += 1

    async with anyio.create_task_group() as load:
        for instance in rates:
            load.start_soon(through, instance)
    return counts["ok"], counts["limited"]


async def test_three_instances_let_through_only_the_tokens_of_one_shared_bucket(
    bus_settings: BusSettings,
) -> None:
    clock = Clock()
    async with clients(bus_settings, 3) as connections:
        rates = [
            await TenantRates.open(c, "test_quota", 10, lease_s=0.3, clock=clock)
            for c in connections
        ]
        assert rates[0].batch == 3  # leased three at a time: 10 per s x 0.3 s
        with anyio.fail_after(30):
            # Full at first: the bucket's ten tokens, however the instances split them.
            assert await drive(rates, 20) == (10, 50)
            # Half a second later, past every lease: five tokens came back, no more.
            clock.now += 0.5
            assert await drive(rates, 20) == (5, 55)
            # Idle for long: the bucket is full again, and never more than full.
            clock.now += 60
            assert await drive(rates, 20) == (10, 50)


async def test_a_tenant_s_bucket_is_its_own(bus_settings: BusSettings) -> None:
    clock = Clock()
    async with clients(bus_settings, 2) as connections:
        first, second = [
            await TenantRates.open(c, "test_quota", 2, lease_s=0.05, clock=clock)
            for c in connections
        ]
        await first.take("acme")
        await second.take("acme")
        with pytest.raises(RateLimited) as refused:
            await first.take("acme")
        await second.take("globex")
    assert "tenant acme is over its quota of 2 calls per second" in refused.value.message
    assert refused.value.code == codes.RATE_LIMITED


async def test_a_quota_whose_store_does_not_answer_refuses_the_call_as_unavailable(
    bus_settings: BusSettings,
) -> None:
    async with connect(bus_settings, "replica") as connection:
        rates = await TenantRates.open(connection, "test_quota", 5, lease_s=0.05)
    with pytest.raises(QuotaUnavailable) as refused:
        await rates.take("acme")
    assert refused.value.code == codes.UNAVAILABLE
    assert "nothing ran; retry the call" in refused.value.message


async def test_sandbox_slots_whose_store_does_not_answer_refuse_the_command_as_unavailable(
    bus_settings: BusSettings,
) -> None:
    async with connect(bus_settings, "replica") as connection:
        slots = await SharedSlots.open(connection, "test_slots", 2, 5, lease_s=30)
    with pytest.raises(SlotsUnavailable) as refused:
        async with slots.slot("acme"):
            pass
    assert refused.value.code == codes.UNAVAILABLE
    assert "nothing ran; retry the call" in refused.value.message


async def test_two_orchestrators_share_one_tenant_s_rate(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    os.chown(workspace / "a.txt", 1000, 1000)
    # One token, and a hundredth of one back each second: within the test's minute and a
    # half no second token is whole, so exactly one call gets through, however many
    # instances serve it (each with a bucket of its own would let one through each).
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, tenant_calls_per_s=0.01)
    async with (
        run_service(orchestrator_service, settings),
        run_service(orchestrator_service, settings),
    ):
        sessions = [
            await open_session(client, tenant="acme", workspace=str(workspace)) for _ in range(4)
        ]
        results: list[object] = []

        async def calls(session_id: str) -> None:
            for _ in range(5):
                results.append(await call(client, session_id, "read_file", path="a.txt"))

        with anyio.fail_after(90):
            async with anyio.create_task_group() as load:
                for session in sessions:
                    load.start_soon(calls, session.session_id)
    refused = [r for r in results if isinstance(r, ErrorReply)]
    assert len([r for r in results if isinstance(r, ToolOutput)]) == 1
    assert len(refused) == 19
    assert all(r.code == codes.RATE_LIMITED for r in refused), refused


async def test_two_instances_share_a_tenant_s_sandbox_cap(bus_settings: BusSettings) -> None:
    async with clients(bus_settings, 2) as (one, other):
        first = await SharedSlots.open(one, "test_slots", 2, 0, lease_s=30)
        second = await SharedSlots.open(other, "test_slots", 2, 0, lease_s=30)
        async with first.slot("acme"), second.slot("acme"):
            with pytest.raises(TenantBusy) as refused:
                async with first.slot("acme"):
                    pass
            async with second.slot("globex"):
                pass
        async with first.slot("acme"), second.slot("acme"):  # both given back
            pass
    assert refused.value.code == codes.UNAVAILABLE
    assert refused.value.message == (
        "tenant acme has 2 sandboxes running, its cap, and none ended within 0 s: retry "
        "later, stop a background task no longer needed (each live one holds a sandbox: "
        "bg_list, bg_stop), or raise the cap (BASTION_MAX_SANDBOXES_PER_TENANT)"
    )


async def test_an_instance_whose_kept_count_is_stale_looks_again_before_it_refuses(
    bus_settings: BusSettings,
) -> None:
    async with clients(bus_settings, 2) as (one, other):
        first = await SharedSlots.open(one, "test_slots", 2, 0, lease_s=30)
        second = await SharedSlots.open(other, "test_slots", 2, 0, lease_s=30)
        async with first.slot("acme"):
            async with second.slot("acme"):
                # first's kept record (its own slot only) is stale: its write over it fails
                # and the record read again holds the cap
                with pytest.raises(TenantBusy):
                    async with first.slot("acme"):
                        pass
            # first now keeps the record with both slots, but second gave its slot back:
            # a cap reached on the kept record is looked up again, and the slot is free
            async with first.slot("acme"):
                with pytest.raises(TenantBusy):  # and the cap still holds, counted afresh
                    async with second.slot("acme"):
                        pass


HOLDER = textwrap.dedent(
    """
    import sys, anyio
    from bastion.sandbox.sharedslots import SharedSlots, SlotsUnavailable
    from bastion.shared.bus import connect
    from bastion.shared.settings import BusSettings

    async def main() -> None:
        async with connect(BusSettings(nats_url=sys.argv[1]), "doomed") as client:
            slots = await SharedSlots.open(client, "test_slots", 2, 0, lease_s=30)
            async with slots.slot("acme"), slots.slot("acme"):
                print("held", flush=True)
                await anyio.sleep_forever()

    anyio.run(main)
    """
)


async def test_the_slots_of_a_killed_instance_come_back_once_their_lease_ends(
    client: Client, nats_url: str
) -> None:
    async with await anyio.open_process([sys.executable, "-c", HOLDER, nats_url]) as doomed:
        assert doomed.stdout is not None
        said = b""
        with anyio.fail_after(60):
            while b"\n" not in said:
                said += await doomed.stdout.receive()
        doomed.send_signal(signal.SIGKILL)  # no slot given back: it dies holding both
        await doomed.wait()
    assert said == b"held\n"
    clock = Clock(time.time())
    survivor = await SharedSlots.open(client, "test_slots", 2, 0, lease_s=30, clock=clock)
    with pytest.raises(TenantBusy) as refused:
        async with survivor.slot("acme"):
            pass
    assert "tenant acme has 2 sandboxes running, its cap" in refused.value.message
    clock.now += 31  # past the dead instance's leases, which nobody renewed
    async with survivor.slot("acme"), survivor.slot("acme"):
        pass


async def test_two_sandbox_services_hold_a_tenant_to_one_cap(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    first, second = owned(tmp_path / "a"), owned(tmp_path / "b")

    def instance(k: int) -> SandboxSettings:
        return SandboxSettings(
            nats_url=bus_settings.nats_url,
            state_dir=str(tmp_path / "state"),
            max_sandboxes_per_tenant=1,
            tenant_wait_s=0.2,
            docker_owner=f"test-quota-{k}",
        )

    async with (
        run_service(sandbox_service, instance(0)),
        run_service(sandbox_service, instance(1)),
        anyio.create_task_group() as group,
    ):
        group.start_soon(run_as_tenant, client, first, HELD, "acme")
        await anyio.to_thread.run_sync(wait_for_file, first / "started", 20.0)
        # Whichever instance takes them, acme's cap of one is taken, globex's is not.
        refusals = []
        for _ in range(4):
            with pytest.raises(RemoteError) as refused:
                await run_as_tenant(client, second, "touch ran", "acme")
            refusals.append(refused.value)
        other = await run_as_tenant(client, owned(tmp_path / "c"), "true", "globex")
        (first / "go").touch()
    assert other.exit_status == 0
    assert not (second / "ran").exists()
    assert all(r.code == codes.UNAVAILABLE for r in refusals)
    assert all("tenant acme has 1 sandboxes running, its cap" in r.message for r in refusals)
