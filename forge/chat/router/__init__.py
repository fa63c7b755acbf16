"""The router's JSON envelope (K1, K2); its prompt and placeholder detection sit in forge/memory/."""
