"""The router: prompt rendering, JSON envelope parsing, placeholder detection (K1, K2, H2)."""
