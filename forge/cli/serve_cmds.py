"""`forge serve`: the HTTP API and the web page under uvicorn."""
from __future__ import annotations

import click

from .main import Number, get_settings
from .output import note


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs API_TOKEN.")
@click.option("--port", default=8765, show_default=True, type=Number(1, 65535),
              help="Port to listen on.")
def serve(host: str, port: int) -> None:
    """Serve the HTTP API and the web page at http://HOST:PORT/.

    Every route calls the same library function as its CLI twin and answers the same JSON as
    its `--json`. With API_TOKEN set, every route but /health and the page shell needs
    `Authorization: Bearer $API_TOKEN`; without it, only loopback is allowed.
    """
    settings = get_settings()
    from ..serve.guard import check_bind

    check_bind(host, settings.api_token, settings.serve_allowed_hosts)
    import uvicorn

    from ..serve.app import create_app

    shown = f"[{host}]" if ":" in host else host
    note(f"forge serve: http://{shown}:{port}/ (API_TOKEN {'required' if settings.api_token else 'not set: loopback only'}); Ctrl-C stops")
    uvicorn.run(create_app(settings, bind_host=host), host=host, port=port, proxy_headers=False,
                server_header=False, log_level="warning", access_log=False)
