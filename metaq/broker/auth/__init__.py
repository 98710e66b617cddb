"""Listeners, TLS and SASL authentication for the broker (see docs/security.md)."""
