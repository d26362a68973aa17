"""The sandbox service: runs shell commands and the file tools inside a session's workspace.

Each command gets a fresh bubblewrap sandbox (`bastion.shared.sandboxing`): uid 10001, the
machine's programs read-only, the workspace at `/workspace`, a private `/tmp`, no network
unless asked for, and the session's limits. A session naming a `docker:` image instead runs
its commands in one container of its own, removed by `sandbox.release` when it closes.
`read_file` and `write_file` run in the service itself, confined to the workspace. Every
request's workspace is checked first: it must be an existing directory apart from
Bastion's state directory.
"""
