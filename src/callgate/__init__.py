"""callgate: a gRPC service that executes AI-agent tool calls only after its policy gate approves them."""

__version__ = "0.1.0"
