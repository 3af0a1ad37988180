"""kirocrew-mcp: render, discover, probe and manage the MCP servers kiro-cli sessions see."""

__version__ = "0.1.0"
