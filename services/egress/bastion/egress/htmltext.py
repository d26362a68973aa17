"""HTML to markdown or plain text, simply: scripts and styles dropped, headings, links,
list items and paragraphs kept."""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["html_to_text"]

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCK = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "br",
        "tr",
        "table",
        "ul",
        "ol",
        "pre",
        "blockquote",
        "header",
        "footer",
        "main",
        "nav",
        "hr",
        "title",
    }
)


class _Converter(HTMLParser):
    def __init__(self, markdown: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.markdown = markdown
        self.out: list[str] = []
        self.skipping = 0
        self.href: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skipping += 1
        elif self.skipping:
            return
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n" + ("#" * int(tag[1]) + " " if self.markdown else ""))
        elif tag == "li":
            self.out.append("\n- " if self.markdown else "\n")
        elif tag == "a":
            self.href.append(dict(attrs).get("href"))
            if self.markdown:
                self.out.append("[")
        elif tag in _BLOCK:
            self.out.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif self.skipping:
            return
        elif tag == "a" and self.href:
            href = self.href.pop()
            if self.markdown:
                self.out.append(f"]({href})" if href else "]")
        elif re.fullmatch(r"h[1-6]", tag) or tag in _BLOCK:
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_text(html: str, markdown: bool = True) -> str:
    """The readable text of `html`: markdown (`# heading`, `[text](href)`) or plain."""
    converter = _Converter(markdown)
    converter.feed(html)
    converter.close()
    text = "".join(converter.out)
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
