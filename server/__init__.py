"""The callgate server library: command analysis, the domain core, the sandbox, storage, the
tools and the gRPC adapter, composed by `app` (docs/architecture.md draws the layers)."""
