# Sourced by scripts/test and scripts/demo: find a Python (3.11+, preferring 3.13/3.12 so
# Django 6 is used), create .venv and install the project with the dependency groups
# asked for (PGSCHED_ENV_GROUPS; scripts/demo asks for "demo" only, the rest for all the
# development groups). Re-installs only when pyproject.toml changes or a group is missing.
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

# the dependency groups this script needs (scripts/demo: only the demo's); a .venv that
# has them already (and this pyproject.toml) is used as it is
wanted_groups="${PGSCHED_ENV_GROUPS:-test lint demo docs browser}"  # (GROUPS is bash's own)
stamp="$VENV/.pgsched-installed"  # "<pyproject hash> <groups installed>"
wanted="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
installed="$(cat "$stamp" 2>/dev/null || true)"
have=""
if [ -x "$VENV/bin/python" ] && [ "${installed%% *}" = "$wanted" ]; then
  have="${installed#"$wanted"}"
fi
missing=""
for group in $wanted_groups; do
  case " $have " in *" $group "*) ;; *) missing="$missing $group" ;; esac
done
if [ -n "$missing" ]; then
  py="$(pick_python)"
  echo "setting up $VENV with $("$py" --version 2>&1) ..." >&2
  [ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"
  all="$(echo $have $wanted_groups | tr ' ' '\n' | sort -u | tr '\n' ' ')"
  group_args=()
  for group in $all; do group_args+=(--group "$ROOT/pyproject.toml:$group"); done
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -e "$ROOT[binary,embedded]" "${group_args[@]}"
  echo "$wanted $all" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
