"""`skill_find`: the session's skills as the sandbox service listed or searched them, as text.

The sandbox service reads the skills dir (`bastion.sandbox.skillfind`); here its answer
becomes what the model is shown: each skill's name and description, then what it
declares (allowed-tools, network, secret names, timeout, scripts), or why it cannot be
read; a search's best first, each with a line of its instructions that matched.
"""

from __future__ import annotations

from bastion.orchestrator.toolcall import Call
from bastion.proto import subjects
from bastion.proto.sandbox import FindSkills, SkillEntry, SkillListing
from bastion.proto.toolinput import SkillFindInput

__all__ = ["find_skills", "render_listing"]


def _declared(entry: SkillEntry) -> str:
    """What the skill declares, on one line; `declares nothing` for a skill that does not."""
    parts: list[str] = []
    if entry.allowed_tools:
        parts.append("allowed-tools: " + " ".join(entry.allowed_tools))
    if entry.network == ("true",):
        parts.append("network: any public host")
    elif entry.network:
        parts.append("network: " + " ".join(entry.network))
    if entry.secrets:
        parts.append("secrets: " + " ".join(entry.secrets))
    if entry.timeout_s is not None:
        parts.append(f"timeout: {entry.timeout_s:g} s")
    if entry.scripts:
        more = " …" if entry.more_scripts else ""
        parts.append("scripts: " + " ".join(entry.scripts) + more)
    return "; ".join(parts) or "declares nothing"


def _lines(entry: SkillEntry) -> list[str]:
    if entry.problem:
        return [f"- {entry.name}: cannot be read: {entry.problem}"]
    head = f"- {entry.name}: {entry.description}" if entry.description else f"- {entry.name}"
    lines = [head, f"  {_declared(entry)}"]
    if entry.excerpt:
        lines.append(f"  matched: {entry.excerpt}")
    return lines


def render_listing(listing: SkillListing, query: str | None) -> str:
    """The text the model is shown for `listing` (found for `query`, if given)."""
    if not listing.skills:
        if query is None:
            text = "The skills dir holds no skills."
        else:
            text = f"No skill matches {query!r}: try other words, or no query to list them all."
    else:
        count = len(listing.skills)
        noun = "skill" if listing.total == 1 else "skills"
        if query is None:
            text = f"{listing.total} {noun} in the skills dir"
        else:
            verb = "matches" if listing.total == 1 else "match"
            text = f"{listing.total} {noun} {verb} {query!r}, best first"
        if count < listing.total:
            text += f" (the first {count} shown"
            text += ": give more words to narrow it)" if query is not None else ")"
        text += ":\n" + "\n".join(line for e in listing.skills for line in _lines(e))
        text += "\nRead one with skill_read {name}."
    if listing.unread:
        text += "\nThe skills dir holds more entries than are read: only the first by name were."
    return text


async def find_skills(call: Call, given: SkillFindInput) -> str:
    """`skill_find`: the session's skills and what each declares, or those matching words."""
    assert call.session.skills_dir is not None  # only sessions with skills have skill_find
    listing = await call.ask(
        subjects.SANDBOX_SKILL_FIND,
        FindSkills(
            session_id=call.session.session_id,
            skills_dir=call.session.skills_dir,
            query=given.query,
            tenant=call.session.tenant,
        ),
        SkillListing,
    )
    return render_listing(listing, given.query)
