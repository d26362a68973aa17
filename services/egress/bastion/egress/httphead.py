"""An HTTP/1.1 request head as the proxy reads it (with h11), and the answers it writes itself."""

from __future__ import annotations

from dataclasses import dataclass

import h11

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
    """The request head in `head` (up to its blank line), as h11 reads HTTP/1.1.

    h11 refuses what the grammar refuses (a header name with a space, conflicting lengths,
    a second Host); on top, a head must be one head (no bare-LF blank line inside it), an
    HTTP/1.x one, and not carry both Content-Length and Transfer-Encoding. A CONNECT
    without a Host header is read as if it named its target there, as clients send it.

    Raises:
        Refused: it is not a well-formed HTTP/1.x request head; the reason says what is wrong.
    """
    try:
        request = _read(head)
    except Refused:
        if not head.startswith(b"CONNECT "):
            raise
        line_end = head.find(b"\n") + 1
        target = head[: line_end - 1].split(b" ")[1:2]
        request = _read(head[:line_end] + b"Host: " + b"".join(target) + b"\r\n" + head[line_end:])
        return _head(request, without_host=True)
    return _head(request, without_host=False)


def _read(head: bytes) -> h11.Request:
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    connection.receive_data(head)
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError as error:
        raise Refused(
            "request", f"its head is not well-formed HTTP/1.1 ({str(error)[:160]})"
        ) from None
    if not isinstance(event, h11.Request) or connection.trailing_data[0]:
        raise Refused("request", "its head does not end at its blank line: send one CRLF head")
    return event


def _head(request: h11.Request, without_host: bool) -> RequestHead:
    version = request.http_version.decode("ascii")
    if not version.startswith("1."):
        raise Refused("request", "it is not an HTTP/1.1 request")
    headers = tuple(
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in request.headers.raw_items()
        if not (without_host and name.lower() == b"host")
    )
    names = {name.lower() for name, _ in headers}
    if "content-length" in names and "transfer-encoding" in names:
        raise Refused(
            "request",
            "it has both Content-Length and Transfer-Encoding, which servers read two ways: "
            "send one of them",
        )
    return RequestHead(
        request.method.decode("ascii"), request.target.decode("latin-1"), f"HTTP/{version}", headers
    )


def answer(status: int, phrase: str, sentence: str, headers: dict[str, str] | None = None) -> bytes:
    """A complete response the proxy sends itself, its body the sentence."""
    body = (sentence + "\n").encode()
    lines = [f"HTTP/1.1 {status} {phrase}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    lines += ["Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(body)}"]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
