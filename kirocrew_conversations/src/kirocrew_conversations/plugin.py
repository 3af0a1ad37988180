"""kirocrew-conversations hook implementations (entry point ``conversations``).

Registered so the open edition is whole; its features arrive with their issue.
"""
