"""`python -m bastion.cli`: the same as the `bastion` command."""

from __future__ import annotations

from bastion.cli.main import main

main()
