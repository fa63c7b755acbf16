"""`forge mcp`: the memory as a Model Context Protocol server (stdio, or streamable HTTP)."""
from __future__ import annotations

import click

from .main import get_settings
from .output import note


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8766)",
                                 param_hint="--http")
    return host, int(port)


@click.command()
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve the streamable HTTP transport at http://HOST:PORT/mcp instead of stdio; "
                   "anything but loopback needs API_TOKEN.")
def mcp(http: str | None) -> None:
    """Serve the memory to MCP clients (Claude Desktop, Claude Code, editors, agents).

    stdio by default: the client starts `forge mcp` and speaks the protocol on its stdin and
    stdout (logs go to stderr). Tools: remember, recall, memory_list, memory_show, forget,
    hot_block; resource forge://hot. Needs the `mcp` extra: pip install 'forge-memory[mcp]'.
    """
    settings = get_settings()
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        from ..core.errors import ForgeError

        raise ForgeError("forge mcp needs the MCP SDK: pip install 'forge-memory[mcp]'") from None
    if http is None:
        from ..mcp.server import run_stdio

        run_stdio(settings)
        return
    host, port = _host_port(http)
    from ..serve.guard import check_bind

    check_bind(host, settings.api_token, settings.serve_allowed_hosts)
    from ..mcp.server import run_http

    shown = f"[{host}]" if ":" in host else host
    note(f"forge mcp: http://{shown}:{port}/mcp (API_TOKEN "
         f"{'required' if settings.api_token else 'not set: loopback only'}); Ctrl-C stops")
    run_http(settings, host, port)
