"""kirocrew-conversations: durable, parallel Kiro conversations behind an MCP server."""

__version__ = "0.1.0"
