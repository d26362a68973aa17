"""`bastion mcp add|review …` refuse what they cannot send with a sentence, before the bus."""

from __future__ import annotations

from pathlib import Path

import pytest

from bastion.cli.main import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["mcp", "add", "notes"], "give the command that starts the server"),
        (["mcp", "add", "notes", "--url", "http://127.0.0.1:1/mcp", "--", "x"], "not both"),
        (["mcp", "add", "Notes", "--", "x"], "is not a server's name"),
        (["mcp", "review", "no_underscores"], "is not a server's name"),
        (["mcp", "add", "notes", "--effect", "add_note=delete", "--", "x"], "TOOL=EFFECT"),
    ],
)
def test_mcp_add_and_review_refuse_what_they_cannot_send_with_a_sentence(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv[:3], "--state-dir", str(tmp_path), *argv[3:]])
    assert exited.value.code == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and said in error
    assert "Traceback" not in error
