"""`forge serve`: the HTTP API and the web page, an outer ring beside the CLI.

Every route is a thin layer over the library call its CLI twin makes (`tests/test_serve.py`
checks each pair gives the same JSON on the same store). `app.py` holds the routes,
`guard.py` the security layers (bearer token, rate limit, body cap, headers, the bind check),
`static/` the page (plain HTML, CSS and JavaScript: no build step).
"""
