"""The values of the variables a server's spec names: `--env NAME` and `${VAR}` in headers.

A value is the tenant's vault secret of that name, leased to the mcp service (sealed to
its own key, which the vault must list in `BASTION_VAULT_LEASE_KEYS`); a name the vault
does not hold takes the mcp service's own environment variable of that name, so an
operator can give a server a value without storing it. A name found in neither is an
error that says where to put it.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping

from bastion.proto import subjects
from bastion.proto.mcp import McpServerSpec
from bastion.proto.vault import ListSecrets, SecretList
from bastion.shared.bus import Client, Requester
from bastion.shared.errors import InvalidInput
from bastion.shared.leasing import LeaseClient

__all__ = ["VARIABLE", "ValueSource", "names_of"]

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""`${NAME}` in a header's value."""


def names_of(spec: McpServerSpec) -> tuple[str, ...]:
    """Every variable the spec needs a value of, in order, once each."""
    names = list(spec.env)
    for header in spec.headers:
        names.extend(VARIABLE.findall(header.split(":", 1)[1]))
    return tuple(dict.fromkeys(names))


class ValueSource:
    """Finds values in the vault, then in the environment."""

    def __init__(
        self,
        client: Client,
        leases: LeaseClient,
        timeout_s: float,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self._bus = Requester(client, timeout_s)
        self.leases = leases
        """Also what opens the tenant's redaction set (`bastion.shared.secretcuts`)."""
        self._environ = environ

    async def values(
        self, tenant: str, server: str, spec: McpServerSpec, session_id: str = ""
    ) -> dict[str, str]:
        """name → value for everything `spec` names.

        Raises:
            InvalidInput: a name has a value neither in the vault nor in the environment.
        """
        names = names_of(spec)
        if not names:
            return {}
        kept: SecretList = await self._bus.ask(
            subjects.VAULT_LIST, ListSecrets(tenant=tenant), SecretList
        )
        in_vault = tuple(n for n in names if n in {s.name for s in kept.secrets})
        found: dict[str, str] = {}
        if in_vault:
            leased = await self.leases.lease(
                tenant,
                session_id or secrets.token_hex(8),
                f"mcp-{server}-{secrets.token_hex(4)}",
                in_vault,
            )
            found.update(leased)
        for name in names:
            if name not in found and name in self._environ:
                found[name] = self._environ[name]
        missing = [n for n in names if n not in found]
        if missing:
            raise InvalidInput(
                f"MCP server {server} needs {', '.join(missing)}, which has no value: add it "
                f"with `bastion secret add {missing[0]}` (or set it in the mcp service's "
                "environment)"
            )
        return found
