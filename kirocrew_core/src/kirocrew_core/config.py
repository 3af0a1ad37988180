"""Placeholder: replaced by the config module."""


def load_config():
    return None
