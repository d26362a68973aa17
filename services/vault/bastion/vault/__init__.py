"""The vault service. Secrets encrypted at rest, leased to the sandbox service only."""
