"""The policy service decides by the autonomy-level table, through the bus."""

from __future__ import annotations

import pytest

from bastion.policy.levels import LEVEL_TABLE
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.policy import AUTONOMY_LEVELS, Effect, PolicyDecision, PolicyRequest
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

EFFECTS: tuple[Effect, ...] = ("read", "write", "external", "spend")


def ask(level: str, effect: Effect) -> PolicyRequest:
    return PolicyRequest(
        session_id="0123456789abcdef",
        tenant="default",
        agent="tester",
        autonomy=level,  # type: ignore[arg-type]
        tool="shell",
        effect=effect,
    )


async def test_every_level_and_effect_is_decided_as_the_design_table_says(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings
) -> None:
    settings = PolicySettings(nats_url=bus_settings.nats_url)
    async with run_service(policy_service, settings):
        for level in AUTONOMY_LEVELS:
            for effect in EFFECTS:
                decision = await request(
                    client, subjects.POLICY_DECIDE, ask(level, effect), PolicyDecision, timeout_s=5
                )
                assert decision.outcome == LEVEL_TABLE[level][effect]
                assert decision.rule == f"level.{level}.{effect}"
                assert "shell" in decision.reason


@pytest.mark.parametrize(
    ("level", "effect", "words"),
    [
        ("L3", "external", "it asks from L4 and runs from L5"),
        ("L2", "write", "runs without asking from L3"),
        ("L1", "write", "it asks from L2 and runs from L3"),
    ],
)
async def test_a_refusal_or_a_question_says_which_level_would_run_the_call(
    client: Client, run_service: ServiceRunner, level: str, effect: Effect, words: str
) -> None:
    async with run_service(policy_service, PolicySettings):
        decision = await request(
            client, subjects.POLICY_DECIDE, ask(level, effect), PolicyDecision, timeout_s=5
        )
    assert words in decision.reason
