"""A call parked under `bastion up`, approved over the front door's HTTP API with its token."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.helpers.owners import owned
from tests.helpers.running_up import WAITING, Up, bastion, notes_run

pytestmark = pytest.mark.e2e


def test_a_parked_call_approved_over_http_runs_and_nothing_waits_any_more(
    up: Up, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    waiting = WAITING.match(notes_run(up, workspace)[-1])
    assert waiting and not (workspace / "README.md").exists()
    [line] = [o for o in up.output if o.startswith("front door: ")]
    found = re.match(r"front door: (\S+) \(token in (.+)\)$", line)
    assert found is not None
    url, token_line = found[1], Path(found[2]).read_text().strip()
    token = token_line.removeprefix("local:")

    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        listed = http.get("/v1/approvals").json()
        approved = http.post(f"/v1/approvals/{waiting['rid']}", json={"approve": True})

    assert [a["request_id"] for a in listed["approvals"]] == [waiting["rid"]]
    assert approved.status_code == 200, approved.text
    assert approved.json()["approval"]["answered_by"] == "http:local"
    assert approved.json()["result"]["text"] == "wrote 12 bytes to README.md"
    assert (workspace / "README.md").read_text() == "See notes/.\n"
    after = bastion("approvals", "list", state_dir=up.state_dir)
    assert after.returncode == 0 and after.stdout == "nothing waits for a person\n"


def test_a_token_minted_over_http_under_up_is_listed_by_the_cli_and_revoked_over_http(
    up: Up, tmp_path: Path
) -> None:
    """The front door's NATS user may ask its own token endpoints (`/v1/tokens` is a request
    to `frontdoor.tokens.*`) under `bastion up`'s permissions."""
    workspace = owned(tmp_path / "work")
    [line] = [o for o in up.output if o.startswith("front door: ")]
    found = re.match(r"front door: (\S+) \(token in (.+)\)$", line)
    assert found is not None
    url, token = found[1], Path(found[2]).read_text().strip().removeprefix("local:")

    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        created = http.post("/v1/tokens", json={"agent": "claude", "workspace": str(workspace)})
        assert created.status_code == 201, created.text
        token_id = created.json()["info"]["token_id"]
        listed = bastion("token", "list", state_dir=up.state_dir)
        revoked = http.delete(f"/v1/tokens/{token_id}")
        after = http.get("/v1/tokens")

    assert created.json()["token"].startswith("bst_")
    assert listed.returncode == 0 and listed.stdout.startswith(f"{token_id}  claude  "), listed
    assert revoked.status_code == 200, revoked.text
    assert after.json() == {"items": []}
