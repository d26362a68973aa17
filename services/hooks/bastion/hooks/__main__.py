"""`python -m bastion.hooks`: run the hooks service (`bastion up` starts it)."""

from __future__ import annotations

import logging
import os

import anyio

from bastion.hooks.service import hooks_service
from bastion.hooks.settings import HooksSettings
from bastion.shared.errors import BastionError
from bastion.shared.logs import configure_logging
from bastion.shared.settings import load_settings

logger = logging.getLogger(__name__)


def main() -> None:
    """Load the settings (exit with their error when they are bad), then run until told
    to stop."""
    configure_logging("hookrunner")
    try:
        settings = load_settings(HooksSettings)
    except BastionError as error:
        raise SystemExit(f"bastion-hookrunner: {error.message}") from None
    logger.info("hook runner starting", extra={"pid": os.getpid()})
    anyio.run(hooks_service, settings)


if __name__ == "__main__":
    main()
