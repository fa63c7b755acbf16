#!/usr/bin/env python3
"""A real session of the MCP SDK's own client with `forge mcp` over stdio, printed as a
transcript for docs/mcp.md: the server is spawned as Claude Desktop would spawn it, on a fresh
temporary data folder (FORGE_DATA_DIR), with the embedded model.

    .venv/bin/python tools/mcp_transcript.py
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

FORGE = str(Path(sys.executable).parent / "forge")


def show(label: str, result) -> None:
    flag = " (isError)" if getattr(result, "is_error", False) else ""
    print(f"<- {label}{flag}")
    for block in result.content:
        print("   " + block.text.replace("\n", "\n   "))


async def session(data: str) -> None:
    params = StdioServerParameters(command=FORGE, args=["mcp"],
                                   env={"FORGE_DATA_DIR": data, "PATH": os.environ["PATH"]})
    async with Client(params) as client:
        print("-> tools/list")
        for tool in (await client.list_tools()).tools:
            hints = tool.annotations
            marks = [name for name, on in (("read-only", hints.read_only_hint),
                                           ("destructive", hints.destructive_hint)) if on]
            print(f"   {tool.name}({', '.join(tool.input_schema['properties'])})"
                  + (f"  [{', '.join(marks)}]" if marks else ""))
        for name, args in [
            ("remember", {"kind": "decision", "content": "Les sauvegardes restic du NAS partent "
                                                         "chaque nuit vers Backblaze B2."}),
            ("remember", {"kind": "preference", "content": "Réponses en français, sans emoji."}),
            ("recall", {"query": "où vont les sauvegardes ?", "limit": 1}),
        ]:
            print(f"-> tools/call {name} {json.dumps(args, ensure_ascii=False)}")
            show(name, await client.call_tool(name, args))
        print("-> resources/read forge://hot")
        hot = await client.read_resource("forge://hot")
        print("<- " + hot.contents[0].text.replace("\n", "\n   "))
        for name, args in [("recall", {"query": "restic", "limit": 0}),
                           ("forget", {"id": 1}), ("memory_show", {"id": 1})]:
            print(f"-> tools/call {name} {json.dumps(args)}")
            show(name, await client.call_tool(name, args))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(session(str(Path(tmp) / "data")))


if __name__ == "__main__":
    main()
