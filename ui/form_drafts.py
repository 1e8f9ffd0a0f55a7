"""The New run form's saved drafts: one JSON file per person, written whole (a temporary file
renamed over the old), so a half-written draft is never read back."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from ui import lm_form


def draft_path(folder: Path, user: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", user.strip() or "anonymous")[:60]
    return folder / f"{slug}.json"


def save_draft(folder: Path, user: str, draft: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = draft_path(folder, user)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(draft, ensure_ascii=False))
    tmp.replace(path)


def load_draft(folder: Path, user: str) -> Optional[dict]:
    try:
        data = json.loads(draft_path(folder, user).read_text())
    except (OSError, ValueError):
        return None
    return lm_form.upgraded_draft(data) if isinstance(data, dict) else None
