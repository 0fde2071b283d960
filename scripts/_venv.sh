# Sourced by run.sh and test.sh: create or reuse the project's own virtual environment in
# .venv and install the package with the extras named in $SOVA_EXTRAS. Installs are skipped
# when pyproject.toml, setup.py, constraints.txt (the pinned versions, scripts/lock.sh) and
# the compiled core's sources (rust/: its .rs files, manifests and Cargo.lock) have not
# changed since the last successful install; a change in rust/ rebuilds the core.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3}"

if ! command -v "$py" >/dev/null 2>&1; then
  echo "error: $py not found; install Python 3.11 or newer" >&2
  exit 1
fi
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "error: Sova needs Python >= 3.11, $py is $("$py" -V 2>&1)" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    # Debian ships venv's pip bootstrap in a separate package.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "installing python3-venv (Debian splits venv's pip bootstrap into it)..." >&2
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$py" -m venv "$venv"
    else
      echo "error: '$py -m venv' failed; on Debian/Ubuntu run: sudo apt-get install python3-venv" >&2
      exit 1
    fi
  fi
fi

# The compiled policy core (rust/) is built by cargo during the install. rustup puts cargo
# in ~/.cargo/bin, which only a login shell's profile adds to PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; Sova's policy core is Rust: install Rust >= 1.88 (https://rustup.rs) and run this again" >&2
  exit 1
fi

# pyo3's build reads the interpreter in PYO3_PYTHON (setuptools-rust passes the venv's
# otherwise) and recompiles itself when that path changes: naming the base interpreter
# every venv of this machine was made from lets fresh venvs and clones that share a cargo
# tree (CARGO_TARGET_DIR, scripts/ci-nolibvirt.sh) reuse its compiled crates.
PYO3_PYTHON="${PYO3_PYTHON:-$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')}"
export PYO3_PYTHON

extras="${SOVA_EXTRAS:-}"
stamp="$venv/.sova-installed${extras:+-$extras}"
want="$(cd "$root" && { cat pyproject.toml setup.py constraints.txt
  find rust -path rust/target -prune -o -type f \( -name '*.rs' -o -name 'Cargo.*' \) -print | LC_ALL=C sort | xargs cat; } | "$venv/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing Sova${extras:+ [$extras]} into .venv ..." >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  # an interpreter-specific module left by an older build would shadow the abi3 one
  rm -f "$root"/src/sova/policy/_core.cpython-*.so
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$root/constraints.txt" -e "$root${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
