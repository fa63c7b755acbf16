"""`forge mcp`: Forge's memory as a Model Context Protocol server (an outer ring beside the CLI
and `forge/serve/`). `documents.py` holds what each tool answers (the library calls its CLI twin
makes, the twin's `--json` document); `server.py` puts them on the official SDK's `MCPServer`.
Only `forge mcp` imports this package, and only it imports the `mcp` SDK."""
