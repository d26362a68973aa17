"""The hooks service: the operator's command hooks (`<state dir>/hooks.json`), run for the
hook events the orchestrator sends.

`service` registers the hooks and answers the events, `command` runs one command hook,
`settings` is what it reads; the hooks file itself is `bastion.shared.hookfile` (the
`bastion hooks` commands write it).
"""
