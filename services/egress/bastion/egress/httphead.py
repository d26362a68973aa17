"""An HTTP/1.1 request head as the proxy reads it, and the answers it writes itself."""

from __future__ import annotations

from dataclasses import dataclass

from bastion.egress.errors import Refused

__all__ = ["RequestHead", "answer", "parse_head"]

_HOP_BY_HOP = frozenset(
    {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "upgrade"}
)


@dataclass(frozen=True)
class RequestHead:
    """The request line and the headers, in order (names as sent)."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def get(self, name: str) -> list[str]:
        """Every value of header `name` (case-insensitive)."""
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def forwarded(self, path: str) -> bytes:
        """The head to send the origin: origin-form path, proxy and hop headers dropped,
        and `Connection: close` so that one connection carries one checked request."""
        lines = [f"{self.method} {path} {self.version}"]
        lines += [f"{k}: {v}" for k, v in self.headers if k.lower() not in _HOP_BY_HOP]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_head(head: bytes) -> RequestHead:
    """The request head in `head` (up to its blank line).

    Raises:
        Refused: it is not an HTTP/1.x request head.
    """
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refused("request", "it is not an HTTP/1.1 request")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise Refused("request", "a header line is malformed")
        headers.append((name, value.strip()))
    return RequestHead(parts[0], parts[1], parts[2], tuple(headers))


def answer(status: int, phrase: str, sentence: str, headers: dict[str, str] | None = None) -> bytes:
    """A complete response the proxy sends itself, its body the sentence."""
    body = (sentence + "\n").encode()
    lines = [f"HTTP/1.1 {status} {phrase}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    lines += ["Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(body)}"]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
