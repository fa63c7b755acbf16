"""One chat turn: the router, the tools, the recall graph, the outcome, the REPL."""
