"""The sandbox service: runs shell commands and the file tools inside a session's workspace.

Each command gets a fresh bubblewrap sandbox (`bastion.shared.sandboxing`): uid 10001, the
machine's programs read-only, the workspace at `/workspace`, a private `/tmp`, no network
unless asked for, and the session's limits. A session naming a `docker:` image instead runs
its commands in one container of its own, removed by `sandbox.release` when it closes.
The file tools (reading, writing, editing, patching, listing, finding, searching) run in
the service itself, confined to the workspace; `diagnostics` and `run_tests` run the
project's own programs in the session's sandbox, like a command. Every request's workspace
is checked first: it must be an existing directory apart from Bastion's state directory.
"""
