"""The policy service: decides allow / ask / deny for each call, with a reason and the rule.

It holds nothing stateful but its rules: the autonomy-level table of docs/architecture.md §4
(`levels`), the pre-approval grammar (`preapproval`), the operator's Cedar policies
(`cedar_engine`, `cedar_store`), and the order they apply in (`decide`).
"""
