#!/usr/bin/env python3
import json, os, sys, urllib.request

name = sys.argv[1]
token = os.environ["PYPI_TOKEN"]
print("using", token)
with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=20) as r:
    print(name, json.load(r)["info"]["version"])
for url in ["https://example.com/", "http://169.254.169.254/latest/meta-data/"]:
    try:
        urllib.request.urlopen(url, timeout=10)
    except Exception as e:
        print(url, "->", e)
