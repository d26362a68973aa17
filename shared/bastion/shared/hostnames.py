"""Host names as Bastion compares them: lower case, no trailing dot, IDNA 2008 (UTS 46).

Python's own `idna` codec is IDNA 2003: it maps `faß.de` to the different domain `fass.de`
and silently drops a zero-width joiner, so a name compared after it is not the name a
client resolves. Every host compared with a declaration goes through `ascii_host` instead.
"""

from __future__ import annotations

import idna

from bastion.shared.errors import InvalidInput

__all__ = ["InvalidHostName", "ascii_host"]


class InvalidHostName(InvalidInput):
    """A host name that IDNA 2008 refuses; the sentence names it and says what to write."""


def ascii_host(host: str) -> str:
    """`host` lower-cased, trailing dots dropped, brackets of an IPv6 literal dropped, and
    an internationalized name in its `xn--` form (UTS 46, non-transitional).

    Raises:
        InvalidHostName: a non-ASCII name IDNA 2008 refuses (a joiner out of place, a
            symbol that is no letter); the sentence says why.
    """
    name = host.strip().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        return name[1:-1].lower()
    if name.isascii():
        return name.lower()
    try:
        return idna.encode(name, uts46=True, transitional=False).decode("ascii")
    except idna.IDNAError as error:
        raise InvalidHostName(
            f"the host name {name[:100]!r} is not a valid internationalized name ({error}): "
            "write the name as it is registered, or its xn-- form"
        ) from None
