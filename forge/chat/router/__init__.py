"""The router's JSON envelope (a tool and its payload, `done`); its prompt and placeholder
detection sit in forge/memory/."""
