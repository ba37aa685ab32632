"""The MCP surface: the tools (server) over stdio, and the same tools over streamable HTTP inside `serve`."""
