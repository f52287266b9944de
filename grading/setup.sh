#!/usr/bin/env bash
# Gradescope runs this once, as root, when the autograder zip is uploaded. The zip's root is
# the pagedlab repository (build it with `python -m pagedlab.grader.package`), unpacked at
# $PAGEDLAB_AUTOGRADER_ROOT/source. Base image: Gradescope's Ubuntu 22.04 or 24.04 (24.04
# recommended: Python 3.12 and g++ 13 out of the box).
#   PAGEDLAB_AUTOGRADER_ROOT  where Gradescope's folders are (default /autograder; a test runs
#                             the whole package in a temporary one)
set -euxo pipefail

AUTOGRADER="${PAGEDLAB_AUTOGRADER_ROOT:-/autograder}"
export PAGEDLAB_AUTOGRADER_ROOT="$AUTOGRADER"
SRC="$AUTOGRADER/source"
VENV="$AUTOGRADER/venv"
export DEBIAN_FRONTEND=noninteractive

# An image that has them all (a rebuilt one; a test's own machine) skips apt's index update.
PACKAGES=(python3 python3-venv python3-pip python3-dev g++ ca-certificates)
HAVE="$(dpkg-query -W -f='${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null | grep -cx installed || true)"
if [ "$HAVE" != "${#PACKAGES[@]}" ]; then
    apt-get update
    apt-get install -y --no-install-recommends "${PACKAGES[@]}"
fi

# The CPU executor compiles each kernel as C++20 and needs g++ >= 12 (Ubuntu 22.04 ships 11).
if [ "$(g++ -dumpversion | cut -d. -f1)" -lt 12 ]; then
    apt-get install -y --no-install-recommends g++-12
    update-alternatives --install /usr/bin/g++ g++ /usr/bin/g++-12 120
    update-alternatives --install /usr/bin/c++ c++ /usr/bin/g++-12 120
fi
g++ --version

# The same hash-checked versions as every student's ./course: requirements.lock, installed by
# tools/bootstrap.py with uv. The lock is for CPython 3.11. The venv links to its base
# interpreter, so that must be one the sandbox user can run (`nobody` stands in for it: neither
# can enter a root-only folder such as /root/.pyenv); uv brings one into $AUTOGRADER/python when
# the image has none (24.04 ships 3.12).
# torch's CPU build comes from the PyTorch CPU index (bootstrap adds it: PyPI's is the CUDA build).
# uv found as ./course finds it (PATH, or the copy bootstrap keeps in ~/.cache/pagedlab/uv), else
# pip-installed there; a venv of its own only where that fails (about 9 CPU-s more).
UV="$(cd "$SRC/tools" && python3 -c 'import bootstrap, pathlib, sys; print(bootstrap.find_uv(pathlib.Path(sys.argv[1]), sys.executable) or "")' "$VENV" | tail -n 1)" || UV=""
if [ -z "$UV" ]; then
    python3 -m venv "$AUTOGRADER/uv-tool"
    "$AUTOGRADER/uv-tool/bin/pip" install --quiet uv
    UV="$AUTOGRADER/uv-tool/bin/uv"
fi
export UV_PYTHON_INSTALL_DIR="$AUTOGRADER/python"
# The system's own first: a Python found through PATH may live under a home folder.
BASE="$("$SRC/grading/usable_python.sh" nobody 3.11 /usr/bin/python3.11 /usr/local/bin/python3.11 \
        "$("$UV" python find 3.11 2>/dev/null)")" || {
    "$UV" python install 3.11
    chmod -R a+rX "$AUTOGRADER/python"
    BASE="$("$SRC/grading/usable_python.sh" nobody 3.11 "$("$UV" python find --python-preference only-managed 3.11)")"
}
"$UV" venv --seed --python "$BASE" "$VENV"
# Bytecode compiled now: the sandbox user cannot write it into this root-owned venv later, and
# each check process would compile torch's modules again (5.5 CPU-s per import instead of 2.4).
PAGEDLAB_COMPILE_BYTECODE="${PAGEDLAB_COMPILE_BYTECODE:-1}" PATH="$(dirname "$UV"):$PATH" \
    "$VENV/bin/python" "$SRC/tools/bootstrap.py" "$VENV"
# The doctor's lock row (a drift, if any) into the build log. Not the whole `pagedlab doctor` (10
# CPU-s of torch and JupyterLab imports): the smoke grade below proves what a grader needs of this image.
"$VENV/bin/python" -c 'from pagedlab import doctor; print(doctor.format_table([doctor.lock_row()]))'

# Student code runs as this unprivileged user (pagedlab grade switches to it per task), so a
# submission can neither edit the grader's checks nor read the reference solutions.
GRADE_USER="${PAGEDLAB_GRADE_USER:-student}"
id "$GRADE_USER" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "$GRADE_USER"
# A pool for `pagedlab grade-class --jobs N` on an instructor's machine: one user per concurrent
# job (PAGEDLAB_GRADE_USER=pagedlab-grade-0,pagedlab-grade-1,...); Gradescope grades one
# submission per container and needs only the one user.
for i in $(seq 0 $(( ${PAGEDLAB_GRADE_POOL:-0} - 1 ))); do
    id "pagedlab-grade-$i" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "pagedlab-grade-$i"
done
chmod -R a+rX "$SRC" "$VENV" "$AUTOGRADER/python" 2>/dev/null || chmod -R a+rX "$SRC" "$VENV"
export PAGEDLAB_GRADE_USER="$GRADE_USER"
(cd / && runuser -u "$GRADE_USER" -- "$VENV/bin/python" -c "import pagedlab") || {
    echo "setup.sh: the sandbox user $GRADE_USER cannot run $VENV/bin/python" >&2; exit 1; }

# Smoke test at upload time: the reference solutions must earn full marks in this image, with
# the same isolation as a real submission. PAGEDLAB_SETUP_TASKS (e.g. "1,12") limits it to some
# tasks, for a quick rehearsal of the package; unset, every task is graded.
cd "$SRC"
SMOKE=()
[ -z "${PAGEDLAB_SETUP_TASKS:-}" ] || SMOKE=(--tasks "$PAGEDLAB_SETUP_TASKS")
"$VENV/bin/python" -m pagedlab grade --impl solutions ${SMOKE[@]+"${SMOKE[@]}"} --json "$AUTOGRADER/setup-solutions.json"
# Everything that encodes an answer stays the grader's: the package's grader folder (pagedlab/
# grader/: the judge side with the reference attention and expectations, the answer models, the
# committed records), the reference solutions and the hidden planners (pagedlab/sandbox/
# private.py). The judge reads them as root; the submission's code (user student) can neither
# read nor import them, and the check child never needs them: hidden checks' drivers are public
# (pagedlab/drivers/drawn/) and get their scenarios as data.
"$VENV/bin/python" -m pagedlab.sandbox.private seal "$SRC"
# ...and the untouched exercises must score 0 without any autograder problem (this also proves
# the checks never need the now-private solutions).
"$VENV/bin/python" -m pagedlab grade --impl exercises ${SMOKE[@]+"${SMOKE[@]}"} --json "$AUTOGRADER/setup-exercises.json"
"$VENV/bin/python" - "$AUTOGRADER" <<'PY'
import json, sys
sol = json.load(open(f"{sys.argv[1]}/setup-solutions.json"))
lost = [t["name"] for t in sol["tests"] if t["score"] < t["max_score"]]
assert not lost, f"solutions lose points in this image: {lost}"
ex = json.load(open(f"{sys.argv[1]}/setup-exercises.json"))
assert ex["score"] == 0, f"the untouched exercises score {ex['score']}"
broken = [t["name"] for t in ex["tests"] if "autograder problem" in t["output"]]
assert not broken, f"autograder problems on the exercises: {broken}"
print(f"solutions {sol['score']} in {sol['execution_time']} s, exercises {ex['score']}: autograder image OK")
PY
