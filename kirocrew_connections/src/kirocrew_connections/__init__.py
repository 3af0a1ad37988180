"""kirocrew-connections: third-party accounts through OAuth MCP servers, never holding a credential."""

__version__ = "0.1.0"
