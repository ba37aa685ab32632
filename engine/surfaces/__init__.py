"""The surfaces: CLI, HTTP, MCP and the web page, each a thin layer over the facade (engine.api)."""
