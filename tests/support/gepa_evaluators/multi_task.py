"""Written for GEPA's optimize_anything, multi-task search (a dataset): a palette of colour names
that must hold each example's colour. Returns the palette drawn as swatches, as an oa.Image."""

import base64
import io

from PIL import Image, ImageDraw

import gepa.optimize_anything as oa


def swatches(names):
    pic = Image.new("RGB", (16 * max(len(names), 1), 16), "white")
    draw = ImageDraw.Draw(pic)
    for i, name in enumerate(names):
        try:
            draw.rectangle([16 * i, 0, 16 * i + 15, 15], fill=name)
        except ValueError:
            draw.line([16 * i, 0, 16 * i + 15, 15], fill="black")  # not a colour name: a cross-out
    buf = io.BytesIO()
    pic.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def evaluate(candidate, example):
    names = candidate.split()
    ok = example["colour"] in names
    return float(ok), {"wanted": example["colour"], "palette": names,
                       "swatches": oa.Image(base64_data=swatches(names), media_type="image/png")}
