"""kirocrew-computer: gated computer-use tools."""

__version__ = "0.1.0"
