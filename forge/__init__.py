"""Forge: a personal assistant with a durable memory for people who run their own models."""
__version__ = "0.1.0"
