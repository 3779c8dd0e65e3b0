"""OCR engines on generated scans of known text: character error rate and seconds per page.

    python -m bench.ocr [--pages 6] [--engines tesseract,rapidocr]

Each page is known prose (``tests/scans.py``) rendered at a scanner's resolution and degraded
(a skew, speckle noise, blur, JPEG). Conditions: clean 300 dpi, typical 200 dpi, and a poor
150 dpi scan with more skew and noise and a sans font. The engines:

- ``tesseract``: Debian's tesseract-ocr 5.3 with ``eng``, through ``rag_tools.kb.ocr.read_image``
  (pytesseract, one thread per process);
- ``rapidocr``: rapidocr-onnxruntime (PaddleOCR's detection and recognition models as ONNX, in
  its wheel; not a project dependency: ``pip install rapidocr-onnxruntime`` to compare), lines
  joined top to bottom.

The figure is the CER (edit distance / expected characters, whitespace runs as one space) and
the wall time per page, same pages for every engine, in one run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from PIL import Image

from tests.scans import SANS, cer, page_text, render_page

from ._util import median, table

CONDITIONS: dict[str, dict[str, object]] = {
    "clean 300 dpi": {"dpi": 300, "skew": 0.0, "noise": 0.0, "jpeg_quality": 92},
    "typical 200 dpi": {"dpi": 200, "skew": 0.6, "noise": 0.04, "jpeg_quality": 70},
    "poor 150 dpi": {"dpi": 150, "skew": 1.5, "noise": 0.08, "jpeg_quality": 45, "font": SANS},
}


def _tesseract() -> Callable[[Image.Image], str]:
    from rag_tools.kb.ocr import read_image

    return lambda image: read_image(image).text


def _rapidocr() -> Callable[[Image.Image], str]:
    import numpy as np
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()

    def read(image: Image.Image) -> str:
        result, _ = engine(np.asarray(image.convert("RGB")))
        boxes = sorted(result or [], key=lambda r: (r[0][0][1], r[0][0][0]))
        return "\n".join(text for _, text, _ in boxes)

    return read


ENGINES = {"tesseract": _tesseract, "rapidocr": _rapidocr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=6)
    parser.add_argument("--engines", default="tesseract,rapidocr")
    args = parser.parse_args()
    engines = {name: ENGINES[name]() for name in args.engines.split(",")}
    rows = []
    for condition, options in CONDITIONS.items():
        pages = [
            (page_text(seed), render_page(page_text(seed), seed=seed, **options))
            for seed in range(args.pages)
        ]  # type: ignore[arg-type]
        for name, read in engines.items():
            read(pages[0][1])  # warm-up: model load, first-call costs
            rates, seconds = [], []
            for text, image in pages:
                start = time.perf_counter()
                got = read(image)
                seconds.append(time.perf_counter() - start)
                rates.append(cer(text, got))
            mean_cer = sum(rates) / len(rates)
            rows.append([condition, name, f"{mean_cer:.2%}", f"{max(rates):.2%}", f"{median(seconds):.2f}"])
            print(table(["condition", "engine", "CER mean", "CER worst", "s/page (median)"], rows[-1:]))
    print()
    print(table(["condition", "engine", "CER mean", "CER worst", "s/page (median)"], rows))


if __name__ == "__main__":
    main()
