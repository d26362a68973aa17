"""What several test modules share that is not a fixture: servers, clients and checks.

Fixtures live in the `conftest.py` of the folder that uses them; a test module imports
helpers from here and never from another test module (`tests/docs/test_test_imports.py`).
"""
