"""Draw the candidate SVG (rectangles and circles only) with Pillow and compare it with the target.

Score: the share of the 64x64 pixels whose colour matches the target. side_info carries the
rendered picture, the target and a difference mask as images, a short text account, and two
objectives in side_info["scores"] (pixels right, and whether the SVG parsed at all).
"""

import io
import xml.etree.ElementTree as ET

from PIL import Image as PILImage, ImageChops, ImageDraw

import refract_evaluator as oa

SIZE = 64
TARGET = """<svg width="64" height="64">
  <rect x="0" y="0" width="64" height="64" fill="blue"/>
  <circle cx="32" cy="32" r="16" fill="red"/>
</svg>"""


def render(svg: str) -> PILImage.Image:
    """The picture of an SVG made of <rect> and <circle>; raises ValueError on anything else."""
    root = ET.fromstring(svg)
    pic = PILImage.new("RGB", (SIZE, SIZE), "white")
    draw = ImageDraw.Draw(pic)
    for el in root:
        tag = el.tag.split("}")[-1]
        num = lambda name: float(el.get(name, 0))  # noqa: E731
        fill = el.get("fill", "black")
        if tag == "rect":
            draw.rectangle([num("x"), num("y"), num("x") + num("width") - 1, num("y") + num("height") - 1], fill=fill)
        elif tag == "circle":
            cx, cy, r = num("cx"), num("cy"), num("r")
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
        else:
            raise ValueError(f"unsupported element <{tag}>: use <rect> and <circle>")
    return pic


def png(pic: PILImage.Image) -> bytes:
    buf = io.BytesIO()
    pic.save(buf, format="PNG")
    return buf.getvalue()


def evaluate(candidate):
    target = render(TARGET)
    try:
        pic = render(candidate)
    except (ET.ParseError, ValueError) as exc:
        return 0.0, {"feedback": f"the SVG could not be drawn: {exc}", "target": oa.Image(png(target)),
                     "scores": {"pixels": 0.0, "parses": 0.0}}
    diff = ImageChops.difference(pic, target).convert("L").point(lambda v: 255 if v else 0)
    wrong = sum(1 for v in diff.getdata() if v)
    score = 1 - wrong / (SIZE * SIZE)
    oa.log(f"{wrong} of {SIZE * SIZE} pixels differ from the target")
    return score, {
        "feedback": f"{score:.1%} of the pixels match the target; white pixels of the difference mask are wrong",
        "rendered": oa.Image(png(pic)),
        "target": oa.Image(png(target)),
        "difference": oa.Image(png(diff)),
        "scores": {"pixels": score, "parses": 1.0},
    }
