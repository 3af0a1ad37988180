"""Restricted execution authorities: one policy, rendered for bubblewrap (Linux) and Seatbelt (macOS)."""
