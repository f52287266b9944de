"""A GPU-free memory-access profile: what each source line asks of the memory system.

A GPU serves the loads and stores of a warp's 32 lanes together, as one request. Global
memory moves in 32-byte sectors, so a request costs as many sectors as its lanes' addresses
touch: 32 consecutive floats need 4 (coalesced), 32 floats 128 bytes apart need 32 (eight
times the traffic for the same data). Shared memory has 32 banks of 4-byte words; lanes that
hit different words of one bank are served one after another (an n-way bank conflict).

The executor sees every access of a checked build (see `sanitizer`), so it can count both
without a GPU: the k-th execution of one instruction by the lanes of a warp forms the k-th
request (lanes re-align at every warp operation and barrier, as a GPU warp does). Sectors are
counted from the start of each argument array, as if it were allocated by cudaMalloc (256-byte
aligned), so the figures do not depend on where numpy put the array.
"""

from __future__ import annotations

import dataclasses

ACCESS = {0: "load", 1: "store", 2: "atomic", 3: "atomic load", 4: "atomic store"}
SPACE = {1: "global", 2: "shared"}


@dataclasses.dataclass(frozen=True)
class LineStats:
    """One source line's requests to one memory space with one kind of access."""

    line: int | None
    space: str            # "global" or "shared"
    access: str           # "load", "store", "atomic", ...
    requests: int         # warp-level requests
    lanes: int            # lane accesses (requests x active lanes)
    sectors: int          # global: 32-byte sectors touched, summed over requests
    ideal: int            # global: sectors the same bytes need when packed
    ways: int             # shared: bank-conflict ways, summed over requests
    max_ways: int         # shared: the worst request

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def efficiency(self) -> float:
        """ideal / actual sectors: 1.0 is perfectly coalesced, 0.125 reads 8x the bytes used."""
        return self.ideal / self.sectors if self.sectors else 1.0

    @property
    def ways_per_request(self) -> float:
        return self.ways / self.requests if self.requests else 0.0


class Profile:
    """Per-line figures of one launch: `rows` (LineStats), `line(n)`, and a printable table."""

    def __init__(self, filename: str, rows: list[LineStats], source: str | None = None,
                 overflow: bool = False):
        self.filename, self.rows, self.source, self.overflow = filename, rows, source, overflow

    def line(self, n: int, space: str | None = None, access: str | None = None) -> LineStats:
        """The figures of source line n (summed if the line has several matching rows)."""
        hits = [r for r in self.rows if r.line == n and (space is None or r.space == space)
                and (access is None or r.access == access)]
        if not hits:
            raise KeyError(f"no {space or ''} {access or 'access'} at {self.filename}:{n} in this profile")
        if len(hits) == 1:
            return hits[0]
        return LineStats(n, hits[0].space if space is None and len({h.space for h in hits}) > 1
                         else hits[0].space, access or "mixed",
                         *[sum(getattr(h, f) for h in hits) for f in
                           ("requests", "lanes", "sectors", "ideal", "ways")],
                         max(h.max_ways for h in hits))

    def table(self) -> str:
        src = self.source.splitlines() if self.source else []
        head = (f"{'line':>5}  {'memory':6}  {'access':6}  {'requests':>9}  {'sectors/req':>11}  "
                f"{'ideal':>5}  {'bank ways':>9}  source")
        out = [f"memory-access profile of {self.filename} (per warp-level request)", head,
               "-" * len(head)]
        for r in self.rows:
            text = src[r.line - 1].strip() if r.line and 0 < r.line <= len(src) else ""
            if len(text) > 60:
                text = text[:57] + "..."
            if r.space == "global":
                spr = f"{r.sectors_per_request:11.1f}"
                ideal = f"{r.ideal / r.requests:5.1f}" if r.requests else ""
                ways = ""
            else:
                spr, ideal = "", ""
                ways = f"{r.ways_per_request:9.1f}"
            line = str(r.line) if r.line else "?"
            out.append(f"{line:>5}  {r.space:6}  {r.access:6}  {r.requests:9d}  {spr:>11}  {ideal:>5}  "
                       f"{ways:>9}  {text}")
        if self.overflow:
            out.append("(more instructions than the profile table holds: some are missing)")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return self.table()


def from_entries(build, entries, source: str | None = None, overflow: bool = False) -> Profile:
    """Group the runtime's per-instruction entries by source line."""
    from .sanitizer import source_lines

    lines = source_lines(build, [e[0] for e in entries])
    merged: dict[tuple, list[int]] = {}
    for pc, space, access, requests, sectors, ideal, ways, max_ways, lanes in entries:
        key = (lines.get(int(pc)), SPACE.get(space, "?"), ACCESS.get(access, "?"))
        acc = merged.setdefault(key, [0, 0, 0, 0, 0, 0])
        acc[0] += requests
        acc[1] += lanes
        acc[2] += sectors
        acc[3] += ideal
        acc[4] += ways
        acc[5] = max(acc[5], max_ways)
    rows = [LineStats(k[0], k[1], k[2], *v) for k, v in merged.items()]
    rows.sort(key=lambda r: (r.line if r.line is not None else 1 << 30, r.space, r.access))
    return Profile(build.filename, rows, source, overflow)
