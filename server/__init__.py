"""The callgate server: domain core, tools, gRPC adapter and command-line interface."""
