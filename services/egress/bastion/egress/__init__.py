"""The egress service: the only way out (the filtering proxy for sandboxes, and fetch_url).

Every connection is resolved by the service itself, each address classified
(`bastion.shared.netclass`), and the connection made to the address checked.
`web_search` is not offered yet: it needs a configured provider.
"""
