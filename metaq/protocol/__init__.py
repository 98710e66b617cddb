"""Kafka wire-format helpers shared by the broker and the clients."""
