"""How the server reaches the network for tools and sandboxed commands: address policy
(`addresses`)."""
