"""The metaq broker: a Kafka-wire-compatible server with its own on-disk log storage."""
