"""The orchestrator: sessions as actors, each call routed catalogue → policy → sandbox → result.

It holds no secret values and no workspace; a session's state lives in the JetStream KV
bucket `bastion_sessions`, so a restarted (or another) orchestrator carries on every
session from the store.
"""
