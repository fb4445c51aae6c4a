# Sourced by scripts/test and scripts/demo: find a Python (3.11+, preferring 3.13/3.12 so
# Django 6 is used), create .venv and install the project with its test and demo
# dependencies. Re-installs only when pyproject.toml changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PGSCHED_VENV:-$ROOT/.venv}"

pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  local candidate
  for candidate in python3.13 python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys' >/dev/null 2>&1; then
      echo "$candidate"; return
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for candidate in "$(pyenv root)"/versions/3.13*/bin/python "$(pyenv root)"/versions/3.12*/bin/python; do
      if [ -x "$candidate" ]; then echo "$candidate"; return; fi
    done
  fi
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
  done
  echo "no python3 found; set PYTHON=/path/to/python3.11+" >&2
  exit 1
}

stamp="$VENV/.pgsched-installed"
wanted="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  py="$(pick_python)"
  echo "setting up $VENV with $("$py" --version 2>&1) ..." >&2
  [ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -e "$ROOT[binary,embedded]" --group "$ROOT/pyproject.toml:test" \
    --group "$ROOT/pyproject.toml:lint" --group "$ROOT/pyproject.toml:demo" \
    --group "$ROOT/pyproject.toml:docs" --group "$ROOT/pyproject.toml:browser"
  echo "$wanted" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
