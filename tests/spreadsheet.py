"""A CSV file as a real spreadsheet engine reads it: LibreOffice Calc, headless (Debian's
`libreoffice-calc-nogui`), converts it to flat OpenDocument, and the cells are read back from
that XML: which ones became formulas, which numbers, and the text of each as the sheet shows it.

The import evaluates formulas, as Excel does when it opens a CSV (`Evaluate formulas`, the 13th
token of LibreOffice's CSV filter options), so a cell the engine would run is a formula here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
INSTALL = "apt-get install -y --no-install-recommends libreoffice-calc-nogui"
# separator ",", quote '"', UTF-8 (76), from line 1, standard columns, en-US, quoted fields not
# forced to text, special numbers detected, (3 export-only tokens), all sheets, evaluate formulas
CSV_IMPORT = "CSV:44,34,76,1,,1033,false,true,false,false,false,-1,true"
_NS = {
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
}


def _q(prefix: str, name: str) -> str:
    return f"{{{_NS[prefix]}}}{name}"


@dataclass
class Cell:
    formula: str | None  # what the engine would compute, if it read the cell as a formula
    kind: str  # office:value-type: "string", "float", ... ("" for an empty cell)
    text: str  # the cell as the sheet shows it


def need_soffice() -> str:
    """LibreOffice's path. CI (.ci/run, as root) installs it; elsewhere the test is skipped with
    how to enable it, except as root with apt, where a missing engine is a failure."""
    if SOFFICE:
        return SOFFICE
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail(f"no LibreOffice to open the CSV with: {INSTALL} (.ci/run installs it)")
    pytest.skip(f"needs a spreadsheet engine to open the CSV: {INSTALL} (as root; .ci/run does it)")


def _text(element) -> str:
    out = []
    for p_index, p in enumerate(element.iter(_q("text", "p"))):
        if p_index:
            out.append("\n")
        out.append(p.text or "")
        for child in p.iter():
            if child is p:
                continue
            if child.tag == _q("text", "s"):
                out.append(" " * int(child.get(_q("text", "c"), "1")))
            elif child.tag == _q("text", "tab"):
                out.append("\t")
            elif child.tag == _q("text", "line-break"):
                out.append("\n")
            else:
                out.append(child.text or "")
            out.append(child.tail or "")
    return "".join(out)


def open_csv(path: Path) -> list[list[Cell]]:
    """The first sheet of `path` opened by LibreOffice, row by row."""
    soffice = need_soffice()
    with tempfile.TemporaryDirectory(prefix="pagedlab-soffice-") as tmp:
        # A profile of its own: two conversions at once would otherwise share (and lock) one.
        profile = Path(tmp, "profile").as_uri()
        run = subprocess.run([soffice, f"-env:UserInstallation={profile}", "--headless", "--norestore",
                              f"--infilter={CSV_IMPORT}", "--convert-to", "fods", "--outdir", tmp, str(path)],
                             capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": tmp})
        converted = Path(tmp, Path(path).stem + ".fods")
        assert converted.is_file(), f"LibreOffice did not convert {path}: {run.stdout}{run.stderr}"
        tree = ET.parse(converted)
    table = tree.getroot().find(f".//{_q('table', 'table')}")
    rows = []
    for row in table.iter(_q("table", "table-row")):
        cells = []
        for cell in row:
            if cell.tag not in (_q("table", "table-cell"), _q("table", "covered-table-cell")):
                continue
            repeat = int(cell.get(_q("table", "number-columns-repeated"), "1"))
            found = Cell(cell.get(_q("table", "formula")), cell.get(_q("office", "value-type"), ""), _text(cell))
            cells += [found] * min(repeat, 64)  # a row's empty tail is one cell repeated 1000s of times
        while cells and cells[-1] == Cell(None, "", ""):
            cells.pop()
        if cells:
            rows.append(cells)
    return rows
