"""Placeholder until the real-servers work lands: real llama-server fixtures and the fake server."""
