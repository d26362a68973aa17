"""The policy service: decides allow / ask / deny for each call, with a reason and the rule.

It holds nothing stateful but its rules. Today the rule is the autonomy-level table of
DESIGN.md §4; taint, pre-approvals and operator (Cedar) policies narrow it in issue 4.
"""
