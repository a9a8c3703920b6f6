"""The domain core: lifecycle, gate, rules, models and errors. Imports neither grpc nor protobuf."""
