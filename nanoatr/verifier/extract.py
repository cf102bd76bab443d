r"""Finding the final answer in a completion: boxes, answer statements, and when several count.

See docs/verifier.md (EXTRACTION) for the rules; MAX_* below bound the work on any input.
"""
from __future__ import annotations

import re
from typing import List, Optional


from .shapes import MAX_ANSWER_CHARS, match_brace  # noqa: F401

MAX_TAIL = 20_000   # only the end of a completion is searched (answers are at the end)
MAX_BOXES = 8       # boxes in the final chain; a longer chain is no answer
MAX_GAP = 300       # characters between two boxes of one final chain
MAX_STATEMENTS = 8  # answer statements examined, counted from the last one

_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")  # a new paragraph ends a chain of boxes (unless it hedges)
_CORRECTION = re.compile(r"(?i)\b(?:wait|actually|mistake|error|wrong|incorrect|re-?check\w*|redo\w*"
                         r"|recomput\w*|recalculat\w*|correct(?:ion|ing)|instead|oops|sorry|revis\w*"
                         r"|miscount\w*|overcount\w*)\b")
_BOX_HEDGE = re.compile(r"(?i)\b(?:maybe|perhaps|possibly|alternatively|either"
                        r"|another (?:possible )?answer)\b|(?:^|\n)[\s*$]*or\b")
# Statement markers (case-insensitive). Bounded repetitions only: they run over 20k characters.
_ANSWER_COLON = re.compile(r"(?i)\banswer\b[*_ \t]{0,4}:")
_ANSWER_IS = re.compile(r"(?i)\b(?:answer|option|choice)s?\b(?:\s+(?:to|for|of)\b[^.\n:$]{0,60}?)?"
                        r"\s+(?:is|are|would be|should be|will be|must be)\b"
                        r"(?:\s+(?:therefore|thus|hence|then|simply|clearly|indeed|just|exactly|now))?\s*:?")
_FINAL_HEADING = re.compile(r"(?im)^[ \t#*_>]*final\s+answer[ \t*_#.]*$")
_HASHES = re.compile(r"(?m)^[ \t]*####[ \t]*")
_ANSWER_TAG = re.compile(r"(?i)<answer>")  # R1-style <think>...</think><answer>...</answer>
_IS_THE_ANSWER = re.compile(r"(?i)\s+is\s+(?:the|my|our)\s+(?:final\s+|correct\s+)?answer\b")
_BEFORE_IS = re.compile(r"(\$[^$\n]{1,200}\$|\\\([^\n]{1,200}?\\\)|[-+\w./{}\\]{1,40})\Z")  # on <= 210 chars
_LINE_PREFIX = re.compile(r"[\W_]*(?:final\s*)?[\W_]*", re.IGNORECASE)
_CHATTER = re.compile(r"(?i)(?:correct|right|wrong|incorrect|above|below|as follows|the following|"
                      r"given|boxed|clear|obvious|consistent|confirmed|verified|not\b.*)\W*")
_SPAN_OPEN = re.compile(r"\$\$|\$|\\\(|\\\[")
_SPAN_CLOSE = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
_CONNECTOR = re.compile(r"(?i)\s*(?:,|;|,?\s*and|,?\s*or|\\text\{\s*(?:,|and|or)\s*\})?\s*")
_PROSE_IS = re.compile(r"(?i)(?:the|a|an|our|my|this|that|it|there)\b[^=$\d]{0,80}?"
                       r"\s(?:is|are|equals|was)\s+(.+)")
_HEDGE = re.compile(r"(?i)\b(?:or|maybe|perhaps|possibly|probably|either|alternatively)\b")
_DISPLAY_OPEN = re.compile(r"\s*(\$\$|\\\[)")


# ---------------------------------------------------------------------------------------------
# boxes
def _box_content(s: str, m: re.Match):
    """(content or None, end index) of the box whose command ends at m."""
    i = j = m.end()
    while j < len(s) and s[j] in " \t":
        j += 1
    if j < len(s) and s[j] == "{":
        end = match_brace(s, j)
        return (None, j) if end < 0 else (s[j + 1:end], end + 1)  # unclosed: truncated output
    if j > i:  # "\boxed 5": the next whitespace-delimited token
        tok = re.match(r"[^\s$]+", s[j:j + MAX_ANSWER_CHARS])
        return (tok.group(0), j + tok.end()) if tok else (None, j)
    return None, j


def _final_boxes(tail: str, matches: list) -> Optional[List[str]]:
    """Contents of the last box and the boxes chained to it by short connecting text."""
    contents, after = [], None
    for m in reversed(matches[-MAX_BOXES - 1:]):
        content, end = _box_content(tail, m)
        if after is not None:
            gap = tail[end:after]
            if content is None or not _chained(gap):
                break
        elif content is None:
            return None  # the last box is unclosed: the output was cut off
        contents.append(content)
        after = m.start()
    if len(contents) > MAX_BOXES:
        return None  # a chain of more than MAX_BOXES boxes is box spam, not an answer
    return contents[::-1]


# ---------------------------------------------------------------------------------------------
# statements
def _starts_line(s: str, i: int) -> bool:
    """Only markup / "Final" before position i on its line ("**Final Answer:**", "## Answer:")."""
    start = s.rfind("\n", 0, i) + 1
    return i - start <= 32 and bool(_LINE_PREFIX.fullmatch(s, start, i))  # short: no backtracking


def _after_marker(s: str) -> str:
    """The answer text after a marker: the rest of its line, or, when that is only markup, the
    next non-empty line or display block ("**Final Answer**\\n\\[ 42 \\]")."""
    s = s[:2 * MAX_ANSWER_CHARS]
    line, _, rest = s.partition("\n")
    if line.strip(" \t*_#:>") and not re.fullmatch(r"\s*(?:\$\$|\\\[)\s*", line):
        return line
    rest = line + "\n" + rest if re.search(r"\$\$|\\\[", line) else rest
    m = _DISPLAY_OPEN.match(rest)
    if m:
        end = rest.find("$$" if m.group(1) == "$$" else "\\]", m.end())
        return "$" + rest[m.end():end] + "$" if end > 0 else ""
    for nxt in rest.split("\n")[:3]:
        if nxt.strip(" \t*_#:>"):
            return nxt
    return ""


def _math_spans(s: str):
    """(start, end, content) of each $..$, $$..$$, \\(..\\), \\[..\\] in s, left to right. Linear:
    each span's closer is found with str.find from its opener, and scanning resumes after it."""
    i = 0
    while True:
        m = _SPAN_OPEN.search(s, i)
        if not m:
            return
        j = s.find(_SPAN_CLOSE[m.group(0)], m.end())
        if j < 0:
            return
        yield m.start(), j + len(_SPAN_CLOSE[m.group(0)]), s[m.end():j]
        i = j + len(_SPAN_CLOSE[m.group(0)])


def _line_answer(s: str) -> Optional[str]:
    """The answer in a statement's text: math spans joined by connectors, else prose-trimmed text."""
    s = s[:MAX_ANSWER_CHARS + 100].strip().strip("*").strip()
    spans = list(_math_spans(s))
    if spans and not re.search(r"\d", s[:spans[0][0]]):
        taken, end = [spans[0][2]], spans[0][1]
        for start, stop, content in spans[1:]:
            if not _CONNECTOR.fullmatch(s, end, start):
                break
            taken.append(content)
            end = stop
        trailing = s[end:]
        if _HEDGE.search(trailing) and re.search(r"\d|\$|\\\(", trailing):
            return None  # "$12$, or maybe $13$": a hedge is no answer
        return ", ".join(taken)
    text = re.split(r"\.(?:\s|$)|\s+(?:because|since|as|so)\s", s, maxsplit=1)[0].strip(" *")
    m = _PROSE_IS.match(text)
    if m:  # "Answer: The number of ways is 120."
        text = m.group(1)
    return _trim_prose(text)


def _trim_prose(text: str) -> str:
    """"12 apples" -> "12", "12, which is even" -> "12"; lists, units and hedges are left alone."""
    first, _, rest = text.partition(" ")
    first = first.rstrip(",;:")
    if (rest and re.search(r"\d", first) and re.search(r"(?<![\\a-zA-Z])[a-zA-Z]{4,}", rest)
            and not _HEDGE.search(rest) and not re.search(r"\d", rest)):
        return first
    return text


def _statement_text(tail: str, kind: str, m: re.Match) -> str:
    if kind == "is the answer":  # the answer is written before the marker
        before = _BEFORE_IS.search(tail[max(0, m.start() - 210):m.start()])
        return before.group(1) if before else ""
    if kind == "tag":
        inner = tail[m.end():m.end() + 2 * MAX_ANSWER_CHARS]
        end = inner.lower().find("</answer>")
        return inner[:end].strip() if end >= 0 else ""  # unclosed: cut off, no answer
    return _after_marker(tail[m.end():])


def _last_statement(tail: str, after: int = -1, line_start_only: bool = False) -> Optional[List[str]]:
    """The answer of the last statement after position `after` (chatter statements skipped), with
    the answers of statements hedged with it (see _chained)."""
    found = []  # (position, kind, match, starts a line): positions only, cheap to collect
    for kind, pattern in (("colon", _ANSWER_COLON), ("is", _ANSWER_IS), ("heading", _FINAL_HEADING),
                          ("hashes", _HASHES), ("is the answer", _IS_THE_ANSWER), ("tag", _ANSWER_TAG)):
        for m in pattern.finditer(tail, max(after, 0)):
            starts = kind in ("heading", "hashes", "tag") or kind == "colon" and _starts_line(tail, m.start())
            if m.start() > after and (starts or not line_start_only):
                found.append((m.start(), kind, m))
    answers, start = [], None  # the last statement's answer, then those hedged with it
    for pos, kind, m in sorted(found, key=lambda f: f[0], reverse=True)[:MAX_STATEMENTS]:
        answer = _line_answer(_statement_text(tail, kind, m))
        if not answer or _CHATTER.fullmatch(answer):
            continue
        if answers:
            gap = tail[m.end():start].replace(answer, "", 1)
            if not _chained(gap, statement=True):
                break
        answers.append(answer)
        start = pos
    return answers[::-1] or None


def _chained(gap: str, statement: bool = False) -> bool:
    """Do two answers separated by `gap` belong to one final answer (a hedge or a list)? Yes if
    the gap hedges ("or maybe"); no if it corrects ("Wait, I miscounted"); else boxes chain
    within a paragraph, statements only when nothing but short words lies between them
    ("Answer: 5\nAnswer: 6", "The answer is 12. The answer is 13")."""
    if len(gap) > MAX_GAP:
        return False
    if _BOX_HEDGE.search(gap):
        return True
    if _CORRECTION.search(gap):
        return False
    if statement:
        return not re.search(r"[a-zA-Z]{4,}", gap)
    return not _BLANK_LINE.search(gap)


def extract_answers(completion: str) -> List[str]:
    """The final answer(s) of a completion: [] when it has no (complete) answer marker."""
    tail = completion[-MAX_TAIL:]
    boxes = list(_BOX.finditer(tail))
    if boxes:
        # A later "Answer: X" replaces the box only when it starts a line (DAPO's required last
        # line); "to double-check the answer: 2+3=5" or "the answer is correct" after it is chatter.
        later = _last_statement(tail, boxes[-1].start(), line_start_only=True)
        if later is not None:
            return later
        return [b for b in _final_boxes(tail, boxes) or [] if b.strip()]
    return _last_statement(tail) or []


def extract_answer(completion: str) -> Optional[str]:
    """The final answer as one string (several final boxes joined by ", "), or None."""
    answers = extract_answers(completion)
    return ", ".join(answers) if answers else None
