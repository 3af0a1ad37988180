"""kirocrew-computer hook implementations (entry point ``computer``).

Registered so the open edition is whole; its features arrive with their issue.
"""
