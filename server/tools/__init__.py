"""Tool plugins, one module per tool or tool family, all registered in one registry."""
