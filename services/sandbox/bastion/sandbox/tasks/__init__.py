"""Background tasks (`bg_run`, `bg_list`, `bg_output`, `bg_stop`): their records, their
logs, and running them in the session's sandbox (docs/sandbox.md, "Background tasks")."""
