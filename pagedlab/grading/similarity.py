"""Which submissions share student-written code: MOSS-style winnowed fingerprints (copydetect).

Everyone starts from the same skeleton, so the handed-out exercises/ files are boilerplate:
their fingerprints are removed before comparing, and a stub shares nothing with anyone.
copydetect tokenizes first (names become V/F/O, strings S), so renaming variables changes
nothing. Files are compared with their namesakes (memory_manager.py with memory_manager.py).

For a pair (a, b), `sim_a` is the share of a's student-written tokens found in b (and the other
way round): copying one file of a large submission shows as a high sim on one side only. Pairs
are ranked by the mean of the two. Similarity is evidence for a person to read, never a verdict:
two students who both followed the notebook closely can write alike.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

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


def _fingerprint(path: Path, boilerplate=None):
    from copydetect import CodeFingerprint

    win = 1 if boilerplate is None else GUARANTEE - NOISE + 1
    return CodeFingerprint(str(path), NOISE, win, boilerplate=boilerplate, encoding="utf-8")


def fingerprints(students: dict[str, Path], skeleton: Path) -> dict[str, dict]:
    """key -> {file name -> CodeFingerprint} for each student's files folder."""
    import numpy as np

    cache: dict[str, object] = {}
    out: dict[str, dict] = {}
    for key, files in students.items():
        out[key] = {}
        if not files.is_dir():
            continue
        for path in sorted(files.iterdir()):
            if path.name not in cache:
                bp = skeleton / path.name
                cache[path.name] = (np.unique(np.array(list(_fingerprint(bp).hashes)))
                                    if bp.is_file() else np.array([], dtype=np.int64))
            try:
                out[key][path.name] = _fingerprint(path, cache[path.name])
            except (UnicodeDecodeError, ValueError):
                continue  # not text: nothing to compare
    return out


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
            code, _ = highlight_overlap(fps[key][name].raw_code, slices, "<mark>", "</mark>",
                                        truncate=8, escape_html=True)
            cols.append(f"<div class='code'><div class='who'>{html.escape(names.get(key, key))} · "
                        f"{html.escape(name)}</div><pre>{code}</pre></div>")
        parts.append(f"<div class='pair'>{''.join(cols)}</div>")
    return "\n".join(parts)
