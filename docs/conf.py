"""Sphinx configuration of Forge's documentation site (`tools/docs OUT` builds it, strict).

Sphinx with MyST Markdown and sphinx-click, as simonw/llm builds its manual: the pages stay
Markdown a reader can also read on a forge's web view, the CLI reference is generated from the
Click application, and the build runs offline (no intersphinx, no link check).
"""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]

project = "Forge"
author = "the Forge project"
copyright = "the Forge project"
extensions = ["myst_parser", "sphinx_click", "forge_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/bench/*.txt are benchmark outputs the pages include, not pages.
exclude_patterns = ["_build", "bench", "Thumbs.db", ".DS_Store"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
html_title = "Forge"
html_static_path: list[str] = []
pygments_style = "sphinx"
# every internal link and anchor is checked (tools/docs runs with -n -W); nothing is fetched.
nitpicky = True
# `--json` in prose and in the generated tables stays two hyphens, quotes stay straight.
smartquotes = False
