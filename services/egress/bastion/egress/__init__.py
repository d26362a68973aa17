"""The egress service: the only way out (filtering proxy, fetch_url, web_search).

Until issue 5 lands it registers on the bus and answers its endpoints with a typed
`not_implemented` error.
"""
