"""Sphinx configuration: MyST Markdown, the furo theme, mermaid diagrams and autodoc.

Django is set up with a minimal settings module (``_ext/pgsched_docs_settings.py``)
so autodoc can import the package; nothing connects to a database.
"""

from __future__ import annotations

import os
import sys
from datetime import date
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]
os.environ["DJANGO_SETTINGS_MODULE"] = "pgsched_docs_settings"

import django  # noqa: E402

django.setup()

import django_pgsched  # noqa: E402

project = "django-pgsched"
author = "django-pgsched contributors"
copyright = f"{date.today().year}, {author}"
release = django_pgsched.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxcontrib.mermaid",
    "pgsched_docs_check",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

html_theme = "furo"
html_title = f"django-pgsched {release}"
