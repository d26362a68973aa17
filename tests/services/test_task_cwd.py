"""A background task's `cwd`: what is refused, and that each refusal is a sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from bastion.sandbox.tasks.cwd import checked_cwd
from bastion.shared.errors import InvalidInput


def test_a_loop_of_links_and_a_huge_cwd_are_refused_with_a_short_sentence(
    tmp_path: Path,
) -> None:
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "l1").symlink_to("l2")
    (tmp_path / "l2").symlink_to("l1")
    (tmp_path / "src").mkdir()
    assert checked_cwd(tmp_path, "src") == "src"
    for cwd in ("loop", "l1", "l1/x", "d/" * 2000, "d\x00x"):
        with pytest.raises(InvalidInput) as refused:
            checked_cwd(tmp_path, cwd)
        assert "is not a directory of the workspace" in refused.value.message
        assert len(refused.value.message) < 400, refused.value.message


def test_a_cwd_leaving_the_workspace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to("/etc")
    for cwd in ("..", "../x", "/etc", "out"):
        with pytest.raises(InvalidInput):
            checked_cwd(tmp_path, cwd)
