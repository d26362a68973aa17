"""The vault service. Secrets encrypted at rest, leased to the sandbox service only.

Until issue 5 lands it registers on the bus and answers its endpoints with a typed
`not_implemented` error.
"""
