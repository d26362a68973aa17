"""`fetch_url` and `web_search` through the egress service, and the text the model is shown."""

from __future__ import annotations

import hashlib

import msgspec

from bastion.orchestrator.execute import run_file_tool
from bastion.orchestrator.toolcall import Call
from bastion.proto import subjects
from bastion.proto.egress import FetchedPage, SearchRequest, SearchResults
from bastion.proto.stubs import FetchRequest
from bastion.proto.toolinput import FetchUrlInput, WebSearchInput, WriteFileInput
from bastion.shared.deadlines import FETCH_S, SEARCH_S

__all__ = ["fetch_page", "kept_path", "search_web"]

_EXTENSIONS = {"markdown": "md", "text": "txt", "html": "html"}


def kept_path(url: str, fmt: str) -> str:
    """Where a cut page's whole text is kept in the workspace: one file per address and format."""
    digest = hashlib.sha256(f"{fmt} {url}".encode()).hexdigest()[:16]
    return f".bastion/fetched/{digest}.{_EXTENSIONS.get(fmt, 'txt')}"


async def fetch_page(call: Call, given: FetchUrlInput) -> str:
    """A page through the egress service; a cut one is kept whole in the workspace if any."""
    ask = FetchRequest(**call.whose(), **msgspec.structs.asdict(given))
    page = await call.ask(
        subjects.EGRESS_FETCH, ask, FetchedPage, timeout_s=max(call.timeout_s, FETCH_S)
    )
    head = f"{page.url} ({page.status}, {page.content_type or 'no content type'})"
    if page.redirects:
        head += f" after {len(page.redirects)} redirect(s)"
    parts = [head]
    if page.cut:
        parts.append(await _cut_note(call, page, given.format))
    parts.append(page.text.rstrip("\n"))
    return "\n".join(parts)


async def _cut_note(call: Call, page: FetchedPage, fmt: str) -> str:
    """The line saying a page was cut, and where its whole text is (written here) if kept."""
    cut = f"the page was cut: {page.cut} characters at the end were left out (the reply limit)"
    if call.session.workspace is None or not page.full_text:
        return cut + "; the rest was not kept (this session has no workspace)"
    path = kept_path(page.url, fmt)
    await run_file_tool(call, WriteFileInput(path=path, content=page.full_text))
    whole = len(page.full_text)
    more = "" if whole >= len(page.text) + page.cut else f" of its first {whole}"
    return f"{cut}; the whole page ({whole} characters{more}) is in {path}; read it with read_file"


async def search_web(call: Call, given: WebSearchInput) -> str:
    """The provider's results as a numbered list: title, address, snippet."""
    ask = SearchRequest(**call.whose(), **msgspec.structs.asdict(given))
    results = await call.ask(
        subjects.EGRESS_SEARCH, ask, SearchResults, timeout_s=max(call.timeout_s, SEARCH_S)
    )
    since = f" from the past {given.freshness}" if given.freshness else ""
    if not results.hits:
        return f"no results for {given.query!r}{since}"
    lines = [f"{len(results.hits)} result(s) for {given.query!r}{since}:"]
    for number, hit in enumerate(results.hits, 1):
        lines.append(f"{number}. {hit.title}\n   {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)
