"""HTML to markdown or plain text, by html-to-markdown's Rust core, off the event loop.

Scripts, styles and the head are dropped; headings, links, lists, `<pre>` blocks (fenced)
and tables (pipe tables; tab-separated in plain text) are kept. The converter releases the
GIL, so a large page converted in a worker thread leaves the egress event loop serving
others; nesting past `MAX_DEPTH` elements is not descended into.
"""

from __future__ import annotations

from typing import Final

import anyio
import html_to_markdown

from bastion.shared.errors import InvalidInput

__all__ = ["MAX_DEPTH", "html_to_text"]

MAX_DEPTH: Final = 512


def _converted(html: str, markdown: bool) -> str:
    options = html_to_markdown.ConversionOptions(
        output_format=(
            html_to_markdown.OutputFormat.MARKDOWN
            if markdown
            else html_to_markdown.OutputFormat.PLAIN
        ),
        extract_metadata=False,
        max_depth=MAX_DEPTH,
    )
    try:
        text = html_to_markdown.convert(html, options).content
    except html_to_markdown.ConversionError as error:
        raise InvalidInput(
            f"the page's HTML could not be read ({str(error)[:200]}): fetch it as html"
        ) from None
    return (text or "").strip() + "\n"


async def html_to_text(html: str, markdown: bool = True) -> str:
    """The readable text of `html`: markdown (`# heading`, `[text](href)`) or plain.

    Raises:
        InvalidInput: the converter could not read the page; the sentence says so.
    """
    return await anyio.to_thread.run_sync(_converted, html, markdown, abandon_on_cancel=True)
