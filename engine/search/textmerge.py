"""Merges that need no LM call: a line-level three-way merge against a common ancestor.

Versions that changed *different lines* of a text since a common ancestor are combined
deterministically by the ``merge3`` package (Breezy's three-way merge); candidates with several
components are merged component by component. Only a *real conflict* — two versions changed
the same lines of the ancestor in different ways — is left to the reflection LM
(``engine.search.sibling_merge``) or, for the system-aware merge, means "no merge".

One kind of merge3 conflict is resolved here rather than by the LM: both versions *inserted*
lines at the same place and changed nothing else there (typically both appended a line at the
end). Both insertions are kept, the first version's lines first, a line both inserted once. The
merged candidate is then tested on the examples that showed each version's gains like any merge,
so an insertion order that does not work is rejected on its merits.
"""

from __future__ import annotations

import difflib
from typing import Optional

from merge3 import Merge3


def _union(a: list[str], b: list[str]) -> list[str]:
    """Two blocks inserted at the same place: a's lines, then b's, common runs once."""
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        out += a[i1:i2]
        if tag in ("insert", "replace"):
            out += b[j1:j2]
    return out


def merge_two(base: str, a: str, b: str) -> Optional[str]:
    """The line-level three-way merge of ``a`` and ``b`` over ``base``; None on a real conflict
    (both changed the same lines of ``base`` differently)."""
    out: list[str] = []
    groups = Merge3(base.split("\n"), a.split("\n"), b.split("\n")).merge_groups()
    for group in groups:
        if group[0] != "conflict":
            out += group[1]
            continue
        _, base_lines, a_lines, b_lines = group
        if base_lines:
            return None
        out += _union(a_lines, b_lines)
    return "\n".join(out)


def merge_texts(base: str, versions: list[str]) -> Optional[str]:
    """All ``versions`` merged over ``base`` (folded left to right); None on a real conflict."""
    merged = versions[0]
    for v in versions[1:]:
        merged = merge_two(base, merged, v)
        if merged is None:
            return None
    return merged


def merge_contents(base: dict, versions: list[dict]) -> tuple[dict, list[str]]:
    """Component-wise three-way merge of candidate ``versions`` over ``base``: (the merged
    content, the components with a real conflict — there the content keeps the first changed
    version's text, for the caller to replace)."""
    content, conflicts = dict(base), []
    for name, old in base.items():
        changed = list(dict.fromkeys(v[name] for v in versions if v.get(name, old) != old))
        if not changed:
            continue
        merged = merge_texts(old, changed)
        if merged is None:
            conflicts.append(name)
            merged = changed[0]
        content[name] = merged
    return content, conflicts
