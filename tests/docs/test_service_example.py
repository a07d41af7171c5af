"""docs/placement-service.md's first example: the answer it shows is what the service answers
to the request it shows (the policy's version included: it names the shipped file's digest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "placement-service.md"


def test_the_pages_example_answer_is_the_services():
    text = PAGE.read_text(encoding="utf-8")
    body = re.search(r"/v1/placements -H 'Content-Type: application/json' -d '(\{.*?\})'\n```", text, re.S)
    answer = re.search(r"The answer:\s*```json\n(.*?)\n```", text, re.S)
    assert body and answer, "the example request or answer block moved"
    policy = re.search(r"deepshare serve --policy (\S+)", text).group(1)  # type: ignore[union-attr]
    engine = PlacementEngine(EngineSettings(policy=policy))
    got = engine.place(PlacementRequest.model_validate_json(body.group(1)))
    assert json.loads(got.model_dump_json(exclude_none=True)) == json.loads(answer.group(1))
