#!/usr/bin/env bash
# usable_python.sh USER VERSION [CANDIDATE ...]: print the first interpreter of Python VERSION
# that USER can run (its stdlib included), and exit 1 when none can. setup.sh builds the grading
# venv on it: a venv only links to its base interpreter, so a Python under a root-only folder
# (a pyenv install in /root) gives the sandbox user "PermissionError: ... venv/bin/python".
set -uo pipefail
user="$1" version="$2"
shift 2
for candidate in "$@"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    real="$(readlink -f "$candidate")"
    if runuser -u "$user" -- "$real" -c "import sys, encodings, json, ctypes; assert sys.version.startswith('$version.')" \
            >/dev/null 2>&1; then
        echo "$real"
        exit 0
    fi
    echo "usable_python: $real (from $candidate) cannot be run by $user or is not Python $version" >&2
done
exit 1
