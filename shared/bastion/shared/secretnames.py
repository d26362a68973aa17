"""Which names a secret may have: an environment variable's, less those that steer programs.

A secret becomes an environment variable of one command. A name the sandbox sets itself
(`PATH`, `HOME`, `LANG`, `TERM`, `TMPDIR`...) would replace what the sandbox relies on; a
name that changes how programs are found or loaded (`LD_PRELOAD`, `PYTHONPATH`,
`NODE_OPTIONS`, `BASH_ENV`...) would let whoever sets the secret run code in every command
that receives it; a proxy or CA variable would redirect or unprotect its connections; and
`BASTION_*` / `NATS_*` are Bastion's own. Those are refused, with the reason.
"""

from __future__ import annotations

import re
from typing import Final

from bastion.proto.vault import MAX_SECRET_BYTES, MIN_SECRET_BYTES
from bastion.shared.errors import InvalidInput

__all__ = [
    "MAX_NAME_LENGTH",
    "RESERVED_NAMES",
    "RESERVED_PREFIXES",
    "check_name",
    "check_value",
    "reserved_reason",
]

MAX_NAME_LENGTH: Final = 128
_NAME: Final = re.compile(r"^[A-Z_][A-Z0-9_]*$")

_SANDBOX: Final = "the sandbox sets it itself for every command"
_LOADING: Final = "it changes how programs are found or loaded"
_NETWORK: Final = "it changes where and how programs connect"
_OURS: Final = "Bastion's own settings use it"

RESERVED_NAMES: Final[dict[str, str]] = {
    **dict.fromkeys(
        (
            "PATH",
            "HOME",
            "SHELL",
            "USER",
            "LOGNAME",
            "LANG",
            "LANGUAGE",
            "TERM",
            "TMPDIR",
            "PWD",
            "OLDPWD",
            "HOSTNAME",
            "TZ",
        ),
        _SANDBOX,
    ),
    **dict.fromkeys(
        (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
            "ALL_PROXY",
            "FTP_PROXY",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
            "GIT_SSL_NO_VERIFY",
            "NODE_TLS_REJECT_UNAUTHORIZED",
        ),
        _NETWORK,
    ),
    **dict.fromkeys(
        (
            "NODE_OPTIONS",
            "NODE_PATH",
            "BASH_ENV",
            "ENV",
            "IFS",
            "CDPATH",
            "PS4",
            "SHELLOPTS",
            "BASHOPTS",
            "GLOBIGNORE",
            "PROMPT_COMMAND",
            "GCONV_PATH",
            "HOSTALIASES",
            "MALLOC_CHECK_",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "CLASSPATH",
            "GIT_EXEC_PATH",
            "GIT_CONFIG",
            "GIT_CONFIG_GLOBAL",
            "GIT_SSH",
            "GIT_SSH_COMMAND",
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "EDITOR",
            "VISUAL",
            "PAGER",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
            "XDG_RUNTIME_DIR",
            "GEM_HOME",
            "GEM_PATH",
            "GOPATH",
            "GOFLAGS",
            "CARGO_HOME",
            "RUSTC_WRAPPER",
            "NPM_CONFIG_PREFIX",
            "PIP_INDEX_URL",
            "PIP_EXTRA_INDEX_URL",
            "PIP_CONFIG_FILE",
            "UV_INDEX_URL",
        ),
        _LOADING,
    ),
}
"""Names refused whole, each with why."""

RESERVED_PREFIXES: Final[tuple[tuple[str, str], ...]] = (
    ("LC_", _SANDBOX),
    ("LD_", _LOADING),
    ("DYLD_", _LOADING),
    ("PYTHON", _LOADING),
    ("PERL5", _LOADING),
    ("PERL_", _LOADING),
    ("RUBY", _LOADING),
    ("BUNDLE_", _LOADING),
    ("LUA_", _LOADING),
    ("GIT_CONFIG_", _LOADING),
    ("SSL_CERT_", _NETWORK),
    ("BASTION_", _OURS),
    ("NATS_", _OURS),
    ("OTEL_", _OURS),
)
"""Families refused by their start, each with why."""


def reserved_reason(name: str) -> str | None:
    """Why `name` may not be a secret's name, or None if it may."""
    if name in RESERVED_NAMES:
        return RESERVED_NAMES[name]
    for prefix, reason in RESERVED_PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


def check_name(name: str) -> str:
    """`name`, if a secret may have it.

    Raises:
        InvalidInput: not an environment variable's name, too long, or reserved; says why.
    """
    if not _NAME.match(name):
        raise InvalidInput(
            f"{name[:64]!r} is not a secret's name: capital letters, digits and "
            "underscores, not starting with a digit, as an environment variable"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidInput(
            f"a secret's name is at most {MAX_NAME_LENGTH} characters; {name[:32]}... has "
            f"{len(name)}"
        )
    reason = reserved_reason(name)
    if reason is not None:
        raise InvalidInput(f"{name} cannot be a secret's name: {reason}; choose another name")
    return name


def check_value(name: str, value: bytes) -> str:
    """`value` as text, if it can be a secret (never quoted in the error).

    Raises:
        InvalidInput: too short to cut out of output safely, too long, not UTF-8, or
            holding a NUL byte (an environment variable cannot).
    """
    if len(value) < MIN_SECRET_BYTES:
        raise InvalidInput(
            f"the value of {name} is {len(value)} bytes: a secret needs at least "
            f"{MIN_SECRET_BYTES}, since a shorter one cannot be cut out of a command's output "
            "without cutting unrelated text too"
        )
    if len(value) > MAX_SECRET_BYTES:
        raise InvalidInput(
            f"the value of {name} is {len(value)} bytes, more than the {MAX_SECRET_BYTES} "
            "a secret may have: keep a large credential in a file and the secret to its key"
        )
    if b"\0" in value:
        raise InvalidInput(
            f"the value of {name} holds a NUL byte, which no environment variable can carry"
        )
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidInput(
            f"the value of {name} is not UTF-8 text: encode a binary secret (base64) first"
        ) from None
