"""The applications: `callgate` and its commands (`main`), the terminal approver (`console`,
drawn by `display`), the web approval console (`web_console`) and the MCP bridge
(`mcp_bridge`, its token in `mcp_token`). They use the server library and the client library;
neither of those imports anything here."""
