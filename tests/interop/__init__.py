"""Interop tests against real third-party RocketMQ clients (see README.md)."""
