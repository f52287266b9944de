"""Which submissions share student-written code: MOSS-style winnowed fingerprints (copydetect).

Everyone starts from the same skeleton, so the handed-out exercises/ files are boilerplate:
their fingerprints are removed before comparing, and a stub shares nothing with anyone.
copydetect tokenizes first (names become V/F/O, strings S), so renaming variables changes
nothing. Files are compared with their namesakes (memory_manager.py with memory_manager.py).

For a pair (a, b), `sim_a` is the share of a's student-written tokens found in b (and the other
way round): copying one file of a large submission shows as a high sim on one side only. Pairs
are ranked by the mean of the two. Similarity is evidence for a person to read, never a verdict:
two students who both followed the notebook closely can write alike.

copydetect hashes k-grams with Python's hash(), which is salted per process, so the winnowed
fingerprints (and the scores) would change from run to run: `stable_hashes` swaps in a keyed
BLAKE2 hash while fingerprints are taken. Highlights cover only what the student wrote: lines
the file shares with its skeleton (in order, as difflib aligns them) are never marked, and a
mark starts and ends on a token boundary.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import html
import re
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from ..untrusted import escape, escape_line

# copydetect's defaults: matches shorter than NOISE tokens are ignored, matches of GUARANTEE
# tokens or more are always found (winnowing window = GUARANTEE - NOISE + 1).
NOISE = 25
GUARANTEE = 30
# Mean similarity from which a pair is listed as worth a look.
FLAG = 0.5


@dataclass
class Pair:
    a: str
    b: str
    sim_a: float
    sim_b: float
    files: list = field(default_factory=list)  # (name, slices in a, slices in b)

    @property
    def score(self) -> float:
        return (self.sim_a + self.sim_b) / 2

    @property
    def flagged(self) -> bool:
        return self.score >= FLAG


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def _stable_kgrams(string: str, k: int):
    import numpy as np

    return np.array([_stable_hash(string[i:i + k]) for i in range(len(string) - k + 1)], dtype=np.int64)


@contextlib.contextmanager
def stable_hashes():
    """copydetect's k-gram hashes made independent of the process's hash seed, for the block."""
    from copydetect import utils

    salted = utils.hashed_kgrams
    utils.hashed_kgrams = _stable_kgrams
    try:
        yield
    finally:
        utils.hashed_kgrams = salted


def _fingerprint(path: Path, boilerplate=None):
    from copydetect import CodeFingerprint

    win = 1 if boilerplate is None else GUARANTEE - NOISE + 1
    with stable_hashes():
        return CodeFingerprint(str(path), NOISE, win, boilerplate=boilerplate, encoding="utf-8")


def fingerprints(students: dict[str, Path], skeleton: Path) -> dict[str, dict]:
    """key -> {file name -> CodeFingerprint} for each student's files folder.

    Each fingerprint also carries `given`: the (start, end) character ranges of its raw code
    that are the skeleton's own lines, never highlighted."""
    import numpy as np

    cache: dict[str, object] = {}
    out: dict[str, dict] = {}
    texts: dict[str, list[str]] = {}
    for key, files in students.items():
        out[key] = {}
        if not files.is_dir():
            continue
        for path in sorted(files.iterdir()):
            if path.name not in cache:
                bp = skeleton / path.name
                cache[path.name] = (np.unique(np.array(list(_fingerprint(bp).hashes)))
                                    if bp.is_file() else np.array([], dtype=np.int64))
                texts[path.name] = (bp.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
                                    if bp.is_file() else [])
            try:
                fp = _fingerprint(path, cache[path.name])
            except (UnicodeDecodeError, ValueError):
                continue  # not text: nothing to compare
            fp.given = given_ranges(fp.raw_code, texts[path.name])
            out[key][path.name] = fp
    return out


def given_ranges(code: str, skeleton_lines: list[str]) -> list[tuple[int, int]]:
    """Character ranges of `code` on lines it shares, in order, with the skeleton."""
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    strip = [ln.strip() for ln in skeleton_lines]
    matcher = difflib.SequenceMatcher(None, strip, [ln.strip() for ln in lines], autojunk=False)
    return [(starts[j], starts[j + n]) for _, j, n in matcher.get_matching_blocks() if n]


_WORD = re.compile(r"\w")


def student_slices(code: str, slices, given: list[tuple[int, int]]):
    """`slices` (copydetect's 2xN starts/ends) without the given ranges, cut to whole tokens."""
    import numpy as np

    marked = bytearray(len(code))
    for start, end in zip(*slices):
        marked[int(start):int(end)] = b"\x01" * (int(end) - int(start))
    for start, end in given:
        marked[start:end] = bytes(end - start)
    word = [bool(_WORD.match(c)) for c in code]
    runs, i = [], 0
    while i < len(code):
        if not marked[i]:
            i += 1
            continue
        j = i
        while j < len(code) and marked[j]:
            j += 1
        start, end = i, j
        while start < end and start > 0 and word[start - 1] and word[start]:
            start += 1  # the run began inside a name or number: start after it
        while end > start and end < len(code) and word[end] and word[end - 1]:
            end -= 1  # ...and ended inside one: stop before it
        while start < end and code[start].isspace():
            start += 1
        while end > start and code[end - 1].isspace():
            end -= 1
        if start < end:
            runs.append((start, end))
        i = j
    return np.array([[s for s, _ in runs], [e for _, e in runs]], dtype=np.int64).reshape(2, len(runs))


def compare(fps: dict[str, dict]) -> list[Pair]:
    """Every pair sharing at least one fingerprint, most similar first."""
    from copydetect import compare_files

    written = {k: sum(fp.token_coverage for fp in files.values()) for k, files in fps.items()}
    # Only pairs with a fingerprint in common can overlap: an index avoids n² empty comparisons.
    holders: dict[tuple[str, int], set[str]] = {}
    for key, files in fps.items():
        for name, fp in files.items():
            for h in fp.hashes:
                holders.setdefault((name, int(h)), set()).add(key)
    candidates = set()
    for keys in holders.values():
        if len(keys) > 1:
            candidates.update(combinations(sorted(keys), 2))
    pairs = []
    for a, b in sorted(candidates):
        if not written[a] or not written[b]:
            continue
        shared_a = shared_b = 0
        pair = Pair(a, b, 0.0, 0.0)
        for name in sorted(set(fps[a]) & set(fps[b])):
            fa, fb = fps[a][name], fps[b][name]
            overlap, (sim_a, sim_b), (slices_a, slices_b) = compare_files(fa, fb)
            if not overlap:
                continue
            # Back to token counts, so a pair's similarity weighs each file by its size.
            shared_a += sim_a * fa.token_coverage
            shared_b += sim_b * fb.token_coverage
            pair.files.append((name, slices_a, slices_b))
        pair.sim_a, pair.sim_b = float(shared_a / written[a]), float(shared_b / written[b])
        if pair.files:
            pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, p.a, p.b))
    return pairs


def side_by_side(pair: Pair, fps: dict[str, dict], names: dict[str, str]) -> str:
    """HTML: each shared file, the two versions next to each other, matches highlighted."""
    from copydetect.utils import highlight_overlap

    parts = []
    for name, slices_a, slices_b in pair.files:
        cols = []
        for key, slices in ((pair.a, slices_a), (pair.b, slices_b)):
            fp = fps[key][name]
            slices = student_slices(fp.raw_code, slices, getattr(fp, "given", []))
            code, _ = highlight_overlap(fp.raw_code, slices, "<mark>", "</mark>",
                                        truncate=8, escape_html=True)
            code = escape(code.replace("\r\n", "\n"))  # bidi overrides and escapes shown, not obeyed
            cols.append(f"<div class='code'><div class='who'>{html.escape(escape_line(names.get(key, key)))} · "
                        f"{html.escape(escape_line(name))}</div><pre>{code}</pre></div>")
        parts.append(f"<div class='pair'>{''.join(cols)}</div>")
    return "\n".join(parts)
