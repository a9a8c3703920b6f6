"""The gRPC adapter: servicers, proto <-> model conversion, status mapping and authentication."""
