"""Text a submission wrote, as the grader handles it: clipped before anything looks at it, and
shown with its control characters escaped.

Anything in a check's record, a crash's output or an upload's file names is the submission's
writing. A 4 MB label must not reach a regular expression (some are quadratic), and an escape
sequence or a carriage return must not reach a terminal, results.json or the class report: there
it could redraw the score table ("✓ task1 8/8 … total 110/110"). Both steps are linear.
"""

from __future__ import annotations

import re

# Longer than any honest label, message or error text (the longest a check writes is ~1500).
MAX_STRING = 4000

# C0 controls but tab and newline, DEL, C1 controls, the bidirectional overrides and isolates,
# line and paragraph separators (they break lines like \n, unseen), and lone surrogates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                      "\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\x00": "\\x00"}


def clip(text: str, limit: int = MAX_STRING) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f" … ({len(text) - limit} more characters)"


def _escaped(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape(text: str) -> str:
    """`text` with every control character shown as an escape (\\r, \\x1b, \\u202e...); newlines
    and tabs kept, so a message keeps its lines."""
    return _CONTROL.sub(_escaped, text)


def escape_line(text: str) -> str:
    """Like `escape`, for text that must stay on one line (a name, a file name, a table cell)."""
    return escape(text).replace("\n", "\\n").replace("\t", "\\t")


# What makes a spreadsheet read a CSV cell as a formula (OWASP's CSV injection rule: `=`, `+`,
# `-`, `@`, tab, carriage return), also after leading spaces, and the full-width forms some
# locales accept. Excel runs `+1+cmd|' /C calc'!A0`; LibreOffice evaluates `=HYPERLINK(...)`.
_FORMULA_START = re.compile("^[ \u3000]*[=+\\-@\t\r\uff1d\uff0b\uff0d\uff20]")


def inert_cell(text: str) -> str:
    """A CSV cell of text from outside the grader (a name, an e-mail, a folder's name): on one
    line, control characters escaped, and, when a spreadsheet would evaluate it, prefixed with
    `'` so it is read as text. Numbers the grader formats itself are written as they are."""
    text = escape_line(clip(text))
    return "'" + text if _FORMULA_START.match(text) else text


def escape_json(value, depth: int = 0):
    """`value` (results.json's dict) with every string in it escaped; keys too."""
    if isinstance(value, str):
        return escape(value)
    if depth > 40:
        return value
    if isinstance(value, dict):
        return {escape(k) if isinstance(k, str) else k: escape_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_json(v, depth + 1) for v in value]
    return value
