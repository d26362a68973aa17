"""`fetch_url` and `web_search` through the egress service, and the text the model is shown."""

from __future__ import annotations

import hashlib

from bastion.proto import subjects
from bastion.proto.egress import FetchedPage, SearchRequest, SearchResults
from bastion.proto.sandbox import FileResult, WriteFile
from bastion.proto.session import SessionInfo
from bastion.proto.stubs import FetchRequest
from bastion.proto.toolinput import FetchUrlInput, WebSearchInput
from bastion.shared.bus import Client, request
from bastion.shared.deadlines import FETCH_S, SEARCH_S

__all__ = ["fetch_page", "kept_path", "search_web"]

_EXTENSIONS = {"markdown": "md", "text": "txt", "html": "html"}


def kept_path(url: str, fmt: str) -> str:
    """Where a cut page's whole text is kept in the workspace: one file per address and format."""
    digest = hashlib.sha256(f"{fmt} {url}".encode()).hexdigest()[:16]
    return f".bastion/fetched/{digest}.{_EXTENSIONS.get(fmt, 'txt')}"


async def fetch_page(
    client: Client, session: SessionInfo, tool_input: FetchUrlInput, timeout_s: float
) -> str:
    """A page through the egress service; a cut one is kept whole in the workspace if any."""
    page: FetchedPage = await request(
        client,
        subjects.EGRESS_FETCH,
        FetchRequest(
            session_id=session.session_id,
            url=tool_input.url,
            format=tool_input.format,
            tenant=session.tenant,
        ),
        FetchedPage,
        timeout_s=max(timeout_s, FETCH_S),
    )
    head = f"{page.url} ({page.status}, {page.content_type or 'no content type'})"
    if page.redirects:
        head += f" after {len(page.redirects)} redirect(s)"
    parts = [head]
    if page.cut:
        parts.append(await _cut_note(client, session, page, tool_input.format, timeout_s))
    parts.append(page.text.rstrip("\n"))
    return "\n".join(parts)


async def _cut_note(
    client: Client, session: SessionInfo, page: FetchedPage, fmt: str, timeout_s: float
) -> str:
    """The line saying a page was cut, and where its whole text is (written here) if kept."""
    cut = f"the page was cut: {page.cut} characters at the end were left out (the reply limit)"
    if session.workspace is None or not page.full_text:
        return cut + "; the rest was not kept (this session has no workspace)"
    path = kept_path(page.url, fmt)
    await request(
        client,
        subjects.SANDBOX_FILES,
        WriteFile(
            session_id=session.session_id,
            workspace=session.workspace,
            path=path,
            content=page.full_text,
            tenant=session.tenant,
        ),
        FileResult,
        timeout_s=timeout_s,
    )
    whole = len(page.full_text)
    more = "" if whole >= len(page.text) + page.cut else f" of its first {whole}"
    return f"{cut}; the whole page ({whole} characters{more}) is in {path}; read it with read_file"


async def search_web(
    client: Client, session: SessionInfo, tool_input: WebSearchInput, timeout_s: float
) -> str:
    """The provider's results as a numbered list: title, address, snippet."""
    results: SearchResults = await request(
        client,
        subjects.EGRESS_SEARCH,
        SearchRequest(
            session_id=session.session_id,
            tenant=session.tenant,
            query=tool_input.query,
            count=tool_input.count,
            freshness=tool_input.freshness,
        ),
        SearchResults,
        timeout_s=max(timeout_s, SEARCH_S),
    )
    since = f" from the past {tool_input.freshness}" if tool_input.freshness else ""
    if not results.hits:
        return f"no results for {tool_input.query!r}{since}"
    lines = [f"{len(results.hits)} result(s) for {tool_input.query!r}{since}:"]
    for number, hit in enumerate(results.hits, 1):
        lines.append(f"{number}. {hit.title}\n   {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)
