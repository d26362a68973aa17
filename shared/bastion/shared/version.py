"""The version every service reports: the installed `bastion` distribution's."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["VERSION"]

try:
    VERSION: str = version("bastion")
except PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0.0.0"
