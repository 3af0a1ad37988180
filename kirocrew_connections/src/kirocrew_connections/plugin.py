"""kirocrew-connections hook implementations (entry point ``connections``).

Registered so the open edition is whole; its features arrive with their issue.
"""
