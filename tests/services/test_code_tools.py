"""The code-changing tools (edit, patch, list, find, search), through the bus, on a workspace."""

from __future__ import annotations

import os
import typing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import (
    ApplyPatch,
    EditFile,
    FileResult,
    FindFiles,
    ListFiles,
    SearchFiles,
)
from bastion.sandbox.finding import MAX_FOUND, MAX_MATCHES
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner, raw_request

SESSION = "0123456789abcdef"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace, with a file no tool may read or change."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("secret\n")
    return path


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> AsyncIterator[None]:
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"))
    async with run_service(sandbox_service, settings):
        yield


async def tool(client: Client, workspace: Path, struct: Any, **fields: Any) -> str:
    given = typing.get_type_hints(struct)["input"](**fields)
    message = struct(session_id=SESSION, workspace=str(workspace), input=given)
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


async def refused(client: Client, workspace: Path, struct: Any, **fields: Any) -> RemoteError:
    with pytest.raises(RemoteError) as caught:
        await tool(client, workspace, struct, **fields)
    assert len(caught.value.message) < 4096
    return caught.value


def write(workspace: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def leftovers(workspace: Path) -> list[str]:
    return [p.name for p in workspace.rglob("*.tmp")]


# --- edit_file ---------------------------------------------------------------------------

CODE = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"


async def test_edit_file_replaces_a_stretch_that_is_there_once(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE})
    said = await tool(
        client, workspace, EditFile, path="a.py", old_string="return 1", new_string="return 10"
    )
    assert said == "edited a.py: replaced old_string 1 time"
    assert (workspace / "a.py").read_text() == CODE.replace("return 1", "return 10")


async def test_edit_file_of_a_directory_is_refused_saying_so(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    error = await refused(client, workspace, EditFile, path="src", old_string="a", new_string="b")
    assert error.code == codes.INVALID_INPUT
    assert "src is a directory, not a file" in error.message


async def test_edit_file_refuses_a_stretch_that_is_there_twice_and_says_how_to_fix_it(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE})
    error = await refused(
        client, workspace, EditFile, path="a.py", old_string="    return", new_string="  return"
    )
    assert error.code == codes.INVALID_INPUT
    assert "2 times" in error.message and "replace_all" in error.message
    assert (workspace / "a.py").read_text() == CODE


async def test_edit_file_with_replace_all_changes_every_occurrence(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE})
    said = await tool(
        client,
        workspace,
        EditFile,
        path="a.py",
        old_string="    return",
        new_string="  return",
        replace_all=True,
    )
    assert said.endswith("2 times")
    assert (workspace / "a.py").read_text() == CODE.replace("    return", "  return")


async def test_edit_file_shows_the_nearest_lines_when_the_stretch_is_not_there(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE})
    error = await refused(
        client,
        workspace,
        EditFile,
        path="a.py",
        old_string="def g():\n  return 2",
        new_string="def g():\n    return 3",
    )
    assert error.code == codes.INVALID_INPUT
    assert "old_string is not in a.py" in error.message
    assert "     5\tdef g():\n     6\t    return 2" in error.message


async def test_edit_file_keeps_the_crlf_line_endings_of_a_file(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await tool(
        client, workspace, EditFile, path="w.txt", old_string="two\nthree", new_string="2\n3\n4"
    )
    assert (workspace / "w.txt").read_bytes() == b"one\r\n2\r\n3\r\n4\r\n"


async def test_edit_file_keeps_a_files_permissions(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"run.sh": "echo one\n"})
    (workspace / "run.sh").chmod(0o755)
    await tool(client, workspace, EditFile, path="run.sh", old_string="one", new_string="two")
    assert (workspace / "run.sh").stat().st_mode & 0o777 == 0o755


# --- apply_patch -------------------------------------------------------------------------


async def test_apply_patch_applies_a_git_diff_that_updates_adds_and_deletes(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE, "old.txt": "bye\n"})
    patch = """diff --git a/a.py b/a.py
index 1111111..2222222 100644
--- a/a.py
+++ b/a.py
@@ -4,3 +4,3 @@ def f():

 def g():
-    return 2
+    return 20
diff --git a/src/new.py b/src/new.py
new file mode 100644
--- /dev/null
+++ b/src/new.py
@@ -0,0 +1,2 @@
+x = 1
+y = 2
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
"""
    said = await tool(client, workspace, ApplyPatch, patch=patch)
    assert said.splitlines() == ["updated a.py", "added src/new.py", "deleted old.txt"]
    assert (workspace / "a.py").read_text() == CODE.replace("return 2", "return 20")
    assert (workspace / "src/new.py").read_text() == "x = 1\ny = 2\n"
    assert not (workspace / "old.txt").exists()
    assert leftovers(workspace) == []


async def test_apply_patch_applies_a_begin_patch_that_adds_updates_deletes_and_moves(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE, "gone.txt": "x\n", "notes.md": "# Notes\nold line\n"})
    patch = """*** Begin Patch
*** Add File: docs/hello.txt
+hello
+world
*** Update File: a.py
@@ def g():
-    return 2
+    return 22
*** Delete File: gone.txt
*** Update File: notes.md
*** Move to: docs/notes.md
@@
 # Notes
-old line
+new line
*** End Patch
"""
    said = await tool(client, workspace, ApplyPatch, patch=patch)
    assert said.splitlines() == [
        "added docs/hello.txt",
        "updated a.py",
        "deleted gone.txt",
        "moved notes.md -> docs/notes.md",
    ]
    assert (workspace / "docs/hello.txt").read_text() == "hello\nworld\n"
    assert (workspace / "a.py").read_text() == CODE.replace("return 2", "return 22")
    assert not (workspace / "gone.txt").exists()
    assert not (workspace / "notes.md").exists()
    assert (workspace / "docs/notes.md").read_text() == "# Notes\nnew line\n"


async def test_a_patch_whose_second_file_does_not_fit_changes_nothing(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"a.py": CODE, "b.py": "value = 1\n"})
    patch = """--- a/a.py
+++ b/a.py
@@ -1,2 +1,2 @@
 def f():
-    return 1
+    return 100
--- a/b.py
+++ b/b.py
@@ -1 +1 @@
-valu = 1
+value = 2
--- /dev/null
+++ b/c.py
@@ -0,0 +1 @@
+c = 3
"""
    error = await refused(client, workspace, ApplyPatch, patch=patch)
    assert error.code == codes.INVALID_INPUT
    assert "no file changed" in error.message
    assert "hunk 1 of b.py does not fit" in error.message
    assert "     1\tvalue = 1" in error.message
    assert (workspace / "a.py").read_text() == CODE
    assert (workspace / "b.py").read_text() == "value = 1\n"
    assert not (workspace / "c.py").exists()
    assert leftovers(workspace) == []


async def test_a_hunk_with_wrong_line_numbers_applies_where_its_lines_are_nearest_the_number(
    client: Client, sandbox: None, workspace: Path
) -> None:
    text = "".join(f"line {n}\n" for n in range(1, 11)) + "x = 1\n" + "filler\n" * 20 + "x = 1\n"
    write(workspace, {"t.txt": text})
    patch = """--- t.txt
+++ t.txt
@@ -40,1 +40,1 @@
-x = 1
+x = 2
"""
    await tool(client, workspace, ApplyPatch, patch=patch)
    lines = (workspace / "t.txt").read_text().splitlines()
    assert lines[10] == "x = 1"  # the first one, line 11, is farther from line 40
    assert lines[31] == "x = 2"


async def test_a_patch_keeps_crlf_and_tolerates_trailing_whitespace_in_context(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "w.txt").write_bytes(b"one  \r\ntwo\r\nthree\r\n")
    patch = "*** Begin Patch\n*** Update File: w.txt\n@@\n one\n-two\n+2\n*** End Patch\n"
    await tool(client, workspace, ApplyPatch, patch=patch)
    assert (workspace / "w.txt").read_bytes() == b"one  \r\n2\r\nthree\r\n"


# --- list_files, find_files, search_files --------------------------------------------------

TREE = {
    "src/main.rs": "fn main() {}\n",
    "src/net/http.rs": "// TODO: retry\nfn get() {}\n",
    "web/app.ts": "export const a = 1;\n",
    "web/view.tsx": "export const v = <div/>;\n",
    "web/old.js": "var a;\n",
    "docs/deep/er/Makefile": "all:\n",
    "README.md": "# todo list\n",
    "node_modules/lib/index.ts": "TODO in a dependency\n",
    "target/debug/out.rs": "TODO built\n",
    ".git/HEAD": "TODO ref\n",
}


async def test_list_files_marks_directories_and_passes_over_build_and_vcs_dirs(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, TREE)
    listed = await tool(client, workspace, ListFiles)
    assert listed.splitlines() == [
        "README.md",
        "docs/",
        "src/",
        "web/",
        "(passed over: .git/, node_modules/, target/)",
    ]
    assert await tool(client, workspace, ListFiles, path="src") == "main.rs\nnet/"


@pytest.mark.parametrize(
    ("pattern", "found"),
    [
        ("src/**/*.rs", ["src/main.rs", "src/net/http.rs"]),
        ("*.{ts,tsx}", ["web/app.ts", "web/view.tsx"]),
        ("Makefile", ["docs/deep/er/Makefile"]),
        ("web/*.js", ["web/old.js"]),
    ],
)
async def test_find_files_matches_globs_sorted_and_passes_over_dependencies(
    client: Client, sandbox: None, workspace: Path, pattern: str, found: list[str]
) -> None:
    write(workspace, TREE)
    assert (await tool(client, workspace, FindFiles, pattern=pattern)).splitlines() == found


async def test_find_files_under_a_path_answers_paths_from_the_workspace_root(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, TREE)
    found = await tool(client, workspace, FindFiles, pattern="*.rs", path="src/net")
    assert found == "src/net/http.rs"


async def test_find_files_says_when_it_cut_its_answer(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {f"many/f{n:04d}.txt": "" for n in range(MAX_FOUND + 7)})
    found = (await tool(client, workspace, FindFiles, pattern="*.txt")).splitlines()
    assert len(found) == MAX_FOUND + 1
    assert found[0] == "many/f0000.txt"
    assert found[-1].startswith("... and 7 more")


async def test_search_files_shows_matches_with_context_and_passes_over_dependencies(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, TREE)
    write(workspace, {"src/lib.rs": "a\nb\nc\n// todo: here\nd\ne\nf\n"})
    (workspace / "blob.bin").write_bytes(b"TODO\0\1\2")
    found = await tool(
        client, workspace, SearchFiles, pattern=r"todo\b", case_insensitive=True, context=1
    )
    assert found.splitlines() == [
        "README.md:1: # todo list",
        "--",
        "src/lib.rs-3- c",
        "src/lib.rs:4: // todo: here",
        "src/lib.rs-5- d",
        "--",
        "src/net/http.rs:1: // TODO: retry",
        "src/net/http.rs-2- fn get() {}",
    ]


async def test_search_files_takes_a_glob_and_is_case_sensitive_by_default(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, TREE)
    found = await tool(client, workspace, SearchFiles, pattern="TODO", glob="*.rs", context=0)
    assert found == "src/net/http.rs:1: // TODO: retry"


async def test_search_files_says_when_it_stopped_early(
    client: Client, sandbox: None, workspace: Path
) -> None:
    write(workspace, {"big.txt": "hit\n" * (MAX_MATCHES + 50)})
    found = (await tool(client, workspace, SearchFiles, pattern="hit", context=0)).splitlines()
    assert len(found) == MAX_MATCHES + 1
    assert found[-1].startswith(f"... the search stopped after {MAX_MATCHES} matching lines")


async def test_search_files_refuses_an_invalid_regular_expression_with_a_sentence(
    client: Client, sandbox: None, workspace: Path
) -> None:
    error = await refused(client, workspace, SearchFiles, pattern="ret(urn")
    assert error.code == codes.INVALID_INPUT
    assert "not a valid regular expression" in error.message


async def test_a_search_that_backtracks_without_end_is_stopped_and_the_service_lives_on(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    workspace: Path,
) -> None:
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"), search_timeout_s=1
    )
    write(workspace, {"a.txt": "a" * 64 + "b\n"})
    async with run_service(sandbox_service, settings):
        error = await refused(client, workspace, SearchFiles, pattern="(a+)+$")
        after = await tool(client, workspace, SearchFiles, pattern="b$", context=0)
    assert error.code == codes.INVALID_INPUT
    assert "did not finish within 1 s" in error.message and "(a+)+" in error.message
    assert "a.txt:1:" in after


# --- confinement -------------------------------------------------------------------------

EVERY_TOOL: list[tuple[Any, dict[str, Any]]] = [
    (EditFile, {"old_string": "secret", "new_string": "gotcha"}),
    (ListFiles, {}),
    (FindFiles, {"pattern": "*"}),
    (SearchFiles, {"pattern": "secret"}),
]
TOOL_IDS = [struct.__name__ for struct, _ in EVERY_TOOL]


def _patch_for(path: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-secret\n+gotcha\n"


@pytest.mark.parametrize(("struct", "fields"), EVERY_TOOL, ids=TOOL_IDS)
async def test_every_code_tool_refuses_a_symbolic_link_out_of_the_workspace(
    client: Client,
    sandbox: None,
    workspace: Path,
    outside: Path,
    struct: Any,
    fields: dict[str, Any],
) -> None:
    os.symlink(outside, workspace / "out")
    path = "out/secret.txt" if struct is EditFile else "out"
    error = await refused(client, workspace, struct, path=path, **fields)
    assert error.code == codes.INVALID_INPUT and "outside the workspace" in error.message
    error = await refused(client, workspace, ApplyPatch, patch=_patch_for("out/secret.txt"))
    assert "outside the workspace" in error.message
    assert (outside / "secret.txt").read_text() == "secret\n"


@pytest.mark.parametrize(("struct", "fields"), EVERY_TOOL, ids=TOOL_IDS)
async def test_every_code_tool_refuses_to_climb_out_with_dotdot(
    client: Client,
    sandbox: None,
    workspace: Path,
    outside: Path,
    struct: Any,
    fields: dict[str, Any],
) -> None:
    path = "../outside/secret.txt" if struct is EditFile else "../outside"
    error = await refused(client, workspace, struct, path=path, **fields)
    assert error.code == codes.INVALID_INPUT and "`..`" in error.message
    error = await refused(client, workspace, ApplyPatch, patch=_patch_for("../outside/secret.txt"))
    assert "`..`" in error.message
    assert (outside / "secret.txt").read_text() == "secret\n"


async def test_a_walk_never_follows_a_link_and_a_search_never_reads_a_hard_link(
    client: Client, sandbox: None, workspace: Path, outside: Path
) -> None:
    os.symlink(outside, workspace / "out")
    os.symlink(outside / "secret.txt", workspace / "s.txt")
    os.link(outside / "secret.txt", workspace / "hard.txt")
    assert (
        await tool(client, workspace, FindFiles, pattern="**/secret.txt")
        == "no files match **/secret.txt"
    )
    assert await tool(client, workspace, SearchFiles, pattern="secret") == "no lines match secret"
    assert await tool(client, workspace, ListFiles) == "hard.txt\nout@\ns.txt@"


async def test_edit_and_patch_refuse_a_hard_linked_file(
    client: Client, sandbox: None, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "hard.txt")
    error = await refused(
        client, workspace, EditFile, path="hard.txt", old_string="secret", new_string="x"
    )
    assert "hard links" in error.message
    error = await refused(client, workspace, ApplyPatch, patch=_patch_for("hard.txt"))
    assert "hard links" in error.message
    assert (outside / "secret.txt").read_text() == "secret\n"


async def test_a_malformed_request_for_a_new_tool_is_answered_bad_request(
    client: Client, sandbox: None, workspace: Path
) -> None:
    data = msgspec.msgpack.encode({"kind": "file.edit", "session_id": SESSION})
    reply = await raw_request(client, subjects.SANDBOX_FILES, data)
    assert reply.headers is not None and reply.headers["Bastion-Error-Code"] == "bad_request"
