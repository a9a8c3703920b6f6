"""Generated protobuf and gRPC code for the callgate.v1 API (see the .proto files beside it)."""
