"""The `bastion` command: bring a local Bastion up, look at it, and drive sessions."""
