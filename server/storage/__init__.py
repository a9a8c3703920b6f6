"""Durable storage: SQLite files under the state directory."""
