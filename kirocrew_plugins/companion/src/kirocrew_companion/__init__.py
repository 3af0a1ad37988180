"""kirocrew-companion: the example companion edition (adds the Claude Code MCP scope)."""

__version__ = "0.1.0"
