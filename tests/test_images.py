"""Images in side information: refract_evaluator.Image, the sandbox's encoding, and the reflection
prompt for a vision model (image_url content parts, downscaled) or a text-only one (omitted, said so).
The built-in example examples/svg_badge runs end to end with a scripted LM declared vision-capable."""

from __future__ import annotations

import base64
import importlib.util
import io
import sys
import tomllib
import warnings

import engine  # noqa: F401  first: offline litellm price map
import litellm
import pytest
from PIL import Image as PILImage

from engine.config import ConfigWarning, parse_config
from engine.lm.images import MAX_SIDE, ImageCollector
from engine.search.reflection import ExampleFeedback, build_prompt
from engine.runs import submit_run
from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from tests.support.harness import ROOT, lm_calls, run_optimizer

EXAMPLE = ROOT / "examples" / "svg_badge"
TARGET_SVG = ('<svg width="64" height="64"><rect x="0" y="0" width="64" height="64" fill="blue"/>'
              '<circle cx="32" cy="32" r="16" fill="red"/></svg>')


def _runtime_module(name: str):
    path = ROOT / "engine" / "sandbox" / "runtime" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_rt_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _png(size=(8, 8), colour="red") -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def test_image_from_bytes_pil_path_base64_and_data_url(tmp_path):
    oa = _runtime_module("refract_evaluator")
    raw = _png()
    b64 = base64.b64encode(raw).decode()
    path = tmp_path / "a.png"
    made = [oa.Image(raw), oa.Image(PILImage.open(io.BytesIO(raw))), oa.Image(str(path)), oa.Image(path=str(path)),
            oa.Image(base64_data=b64, media_type="image/png"), oa.Image(url=f"data:image/png;base64,{b64}")]
    path.write_bytes(raw)  # a path is read when the side information is stored, not when the Image is made
    for img in made:
        stored = img.__refract_image__()
        assert stored["__image__"] == "png"
        assert PILImage.open(io.BytesIO(base64.b64decode(stored["data"]))).size == (8, 8)
    jpeg = io.BytesIO()
    PILImage.new("RGB", (4, 4)).save(jpeg, format="JPEG")
    assert oa.Image(jpeg.getvalue()).__refract_image__()["__image__"] == "jpeg"
    with pytest.raises(ValueError, match="media_type is required"):
        oa.Image(base64_data=b64)
    with pytest.raises(ValueError, match="not a PNG or JPEG"):
        oa.Image(b"hello")
    with pytest.raises(ValueError, match="Exactly one of url, path, or base64_data"):
        oa.Image(raw, path="x.png")


def test_image_has_gepas_fields_and_content_part_and_a_url_is_refused_only_in_the_sandbox(tmp_path):
    oa = _runtime_module("refract_evaluator")
    img = oa.Image(url="https://example.com/a.png")
    assert (img.url, img.path, img.base64_data) == ("https://example.com/a.png", None, None)
    assert img.to_openai_content_part() == {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    assert img.__refract_image__() == {"__image__": "url", "url": "https://example.com/a.png"}  # in a Python process
    (tmp_path / "b.jpg").write_bytes(b"any bytes")
    part = oa.Image(path=str(tmp_path / "b.jpg")).to_openai_content_part()
    assert part["image_url"]["url"] == "data:image/jpeg;base64," + base64.b64encode(b"any bytes").decode()
    with pytest.raises(ValueError, match="Exactly one"):
        oa.Image()
    oa._url_images_allowed = False  # what the sandbox worker sets when [executor] network is off
    with pytest.raises(ValueError, match="the sandbox has no network"):
        img.__refract_image__()


def test_sandbox_encodes_images_and_jpeg_bytes_in_side_info():
    outcome = _runtime_module("outcome")
    oa = _runtime_module("refract_evaluator")
    jpeg = io.BytesIO()
    PILImage.new("RGB", (4, 4)).save(jpeg, format="JPEG")
    _, side = outcome.normalise((1.0, {"a": oa.Image(_png()), "nested": {"b": jpeg.getvalue()}}))
    assert side["a"]["__image__"] == "png" and side["nested"]["b"]["__image__"] == "jpeg"


def _feedback(*sizes) -> list[ExampleFeedback]:
    side = {f"img{i}": {"__image__": "png", "data": base64.b64encode(_png(s)).decode()} for i, s in enumerate(sizes)}
    side["nested"] = {"deep": [side.get("img0")]}
    return [ExampleFeedback("k", 0.5, None, side)]


def _prompt(feedback, vision):
    return build_prompt(kind="", objective="o", background="", component="text", components=["text"],
                        current_text="x", feedback=feedback, human_feedback=[], tried=[], vision=vision)


def test_vision_prompt_has_image_parts_downscaled_under_the_cap():
    p = _prompt(_feedback((8, 8), (3000, 1500)), vision=True)
    content = p.messages[1]["content"]
    assert isinstance(content, list) and content[0]["type"] == "text"
    parts = content[1:]
    assert [c["type"] for c in parts] == ["image_url"] * 3  # two fields and the nested copy
    sizes = []
    for part in parts:
        url = part["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        sizes.append(PILImage.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size)
    assert sizes == [(8, 8), (MAX_SIDE, MAX_SIDE // 2), (8, 8)]
    text = content[0]["text"]
    assert "[IMAGE-1: attached after the text]" in text and "[IMAGE-3: attached after the text]" in text
    assert "1 downscaled to at most 1024 px" in text
    assert "base64" not in text and "iVBOR" not in text  # no image data in the text


def test_text_only_prompt_says_images_were_omitted():
    p = _prompt(_feedback((8, 8)), vision=False)
    text = p.messages[1]["content"]
    assert isinstance(text, str)
    assert text.count("[image omitted: the reflection model cannot see images]") == 2
    assert "iVBOR" not in text


def test_at_most_max_images_per_prompt():
    c = ImageCollector(vision=True)
    c.strip([{"__image__": "png", "data": base64.b64encode(_png()).decode()}] * 10)
    assert len(c.images) == 8 and c.omitted == 2


def _example_config(model: str):
    data = tomllib.loads((EXAMPLE / "config.toml").read_text())
    data["reflection_lm"] = {"model": model, "num_retries": 0}
    return parse_config(data, base_dir=EXAMPLE)


def test_a_model_without_vision_gets_one_config_warning():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _example_config("scripted/text-only")
    messages = [str(w.message) for w in seen if issubclass(w.category, ConfigWarning)]
    assert len([m for m in messages if "cannot see images" in m]) == 1


def test_svg_badge_example_sends_rendered_images_to_a_vision_model(sqlite_db, tmp_path):
    litellm.register_model({"scripted/vision": {"supports_vision": True, "litellm_provider": "scripted",
                                                "mode": "chat", "max_input_tokens": 100_000}})
    assert litellm.supports_vision(model="scripted/vision")

    def script(messages, params):
        content = messages[1]["content"]
        assert isinstance(content, list), "the images should arrive as content parts"
        return "Change: draw the target.\n```\n" + TARGET_SVG + "\n```"

    stats = install_script(script)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # a vision model: no warning
        cfg = _example_config("scripted/vision")
    run_id = submit_run(sqlite_db, cfg)
    assert run_optimizer(sqlite_db, run_id, tmp_path) == "completed"
    run = repo.get_run(sqlite_db, run_id)
    assert run.best_val_mean == 1.0 and run.best_val_mean > 0
    content = stats.calls[0][0][1]["content"]
    urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
    assert len(urls) == 3 and all(u.startswith("data:image/png;base64,") for u in urls)
    pictures = [PILImage.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))) for u in urls]
    assert {p.size for p in pictures} == {(64, 64)}
    assert "[IMAGE-1: attached after the text]" in content[0]["text"]
    # the recorded LM call keeps the request as sent (images included)
    recorded = [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "reflection"][0]
    assert any(p.get("type") == "image_url" for p in recorded.messages[1]["content"])


def test_the_candidate_page_shows_image_parts_as_a_short_note():
    from ui.render import messages_text

    url = "data:image/png;base64," + "A" * 4096
    text = messages_text([{"role": "user", "content": [{"type": "text", "text": "look"},
                                                       {"type": "image_url", "image_url": {"url": url}}]}])
    assert text == "── user ──\nlook\n[image part: image/png, 3 KB]"
