"""A tiny dependency-free line plotter that writes PNG files (for benchmark reports).

Enough for time series: stacked panels sharing the x axis, a few coloured lines per
panel, a legend, axis ticks and labels in a built-in 5x7 pixel font. Uses only the
standard library (zlib for the PNG stream), so benchmarks need no plotting package.
"""
from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

Color = tuple[int, int, int]
PALETTE: list[Color] = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189),
                        (140, 86, 75)]
BLACK, GREY, LIGHT, WHITE = (0, 0, 0), (120, 120, 120), (225, 225, 225), (255, 255, 255)

_GLYPHS = {
    "0": [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "],
    "1": ["  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
    "2": [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"],
    "3": ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "],
    "4": ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "],
    "5": ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "],
    "6": ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "],
    "7": ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "],
    "8": [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "],
    "9": [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "],
    "A": [" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"],
    "B": ["#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "],
    "C": [" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "],
    "D": ["###  ", "#  # ", "#   #", "#   #", "#   #", "#  # ", "###  "],
    "E": ["#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"],
    "F": ["#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "],
    "G": [" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"],
    "H": ["#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"],
    "I": [" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
    "J": ["  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "],
    "K": ["#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"],
    "L": ["#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"],
    "M": ["#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"],
    "N": ["#   #", "#   #", "##  #", "# # #", "#  ##", "#   #", "#   #"],
    "O": [" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "],
    "P": ["#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "],
    "Q": [" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"],
    "R": ["#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"],
    "S": [" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "],
    "T": ["#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "],
    "U": ["#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "],
    "V": ["#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "],
    "W": ["#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "],
    "X": ["#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"],
    "Y": ["#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "],
    "Z": ["#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"],
    " ": ["     "] * 7,
    ".": ["     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "],
    ",": ["     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "],
    ":": ["     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "],
    "-": ["     ", "     ", "     ", "#####", "     ", "     ", "     "],
    "/": ["     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "],
    "%": ["##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"],
    "(": ["   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "],
    ")": [" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "],
    "_": ["     ", "     ", "     ", "     ", "     ", "     ", "#####"],
    "=": ["     ", "     ", "#####", "     ", "#####", "     ", "     "],
    "+": ["     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "],
    "?": [" ### ", "#   #", "    #", "   # ", "  #  ", "     ", "  #  "],
}


class Canvas:
    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def dot(self, x: int, y: int, color: Color) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i:i + 3] = bytes(color)

    def line(self, x0: float, y0: float, x1: float, y1: float, color: Color, width: int = 1) -> None:
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for k in range(width):
                self.dot(x0, y0 + k, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color, fill: bool = False) -> None:
        if fill:
            for y in range(y0, y1 + 1):
                self.line(x0, y, x1, y, color)
        else:
            for a, b, c, d in ((x0, y0, x1, y0), (x1, y0, x1, y1), (x1, y1, x0, y1), (x0, y1, x0, y0)):
                self.line(a, b, c, d, color)

    def text(self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 1) -> int:
        """Draw ``text`` with its top-left corner at (x, y); returns the x after it."""
        for ch in text.upper():
            glyph = _GLYPHS.get(ch, _GLYPHS["?"])
            for row, bits in enumerate(glyph):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        for a in range(scale):
                            for b in range(scale):
                                self.dot(x + col * scale + a, y + row * scale + b, color)
            x += 6 * scale
        return x

    @staticmethod
    def text_width(text: str, scale: int = 1) -> int:
        return 6 * scale * len(text)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[3 * y * self.width:3 * (y + 1) * self.width])
                       for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


@dataclass
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: Color | None = None
    points: bool = False  # draw markers instead of a line (sparse events such as answers)


@dataclass
class Panel:
    title: str
    series: list[Series] = field(default_factory=list)
    unit: str = ""


def _nice(value: float) -> float:
    """A round number at or above ``value`` for an axis maximum."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def _axis(value: float, ticks: int) -> tuple[float, list[float]]:
    """Axis maximum and tick values: round steps, about ``ticks`` of them, covering ``value``."""
    step = _nice(value / ticks if value > 0 and math.isfinite(value) else 1.0 / ticks)
    n = max(1, math.ceil(value / step - 1e-9)) if value > 0 and math.isfinite(value) else ticks
    return n * step, [k * step for k in range(n + 1)]


def _fmt(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:g}K" if v % 1000 == 0 else f"{v:.0f}"
    return f"{v:.0f}" if v == int(v) else f"{v:.3g}"


def plot(path: str | Path, panels: list[Panel], *, title: str = "", x_label: str = "seconds",
         width: int = 960, panel_height: int = 170) -> Path:
    """Write ``panels`` stacked vertically (shared x axis) to a PNG file at ``path``."""
    left, right, top, gap = 80, 20, 34 if title else 12, 46
    height = top + len(panels) * (panel_height + gap) + 10
    c = Canvas(width, height)
    if title:
        c.text(left, 10, title, BLACK, scale=2)
    all_x = [x for p in panels for s in p.series for x in s.xs]
    x_max, x_ticks = _axis(max(all_x) if all_x else 1.0, 6)
    plot_w = width - left - right
    for n, panel in enumerate(panels):
        y0 = top + n * (panel_height + gap) + 16
        y1 = y0 + panel_height - 16
        ys = [y for s in panel.series for y in s.ys if math.isfinite(y)]
        y_max, y_ticks = _axis(max(ys) if ys else 1.0, 4)
        c.text(left, y0 - 14, panel.title + (f" ({panel.unit})" if panel.unit else ""), BLACK)
        for tick in y_ticks:  # horizontal grid and y labels
            yy = y1 - (y1 - y0) * tick / y_max
            c.line(left, yy, left + plot_w, yy, LIGHT)
            label = _fmt(tick)
            c.text(left - 6 - c.text_width(label), int(yy) - 3, label, GREY)
        for tick in x_ticks:
            xx = left + plot_w * tick / x_max
            c.line(xx, y1, xx, y1 + 4, GREY)
            label = _fmt(tick)
            c.text(int(xx) - c.text_width(label) // 2, y1 + 7, label, GREY)
        c.rect(left, y0, left + plot_w, y1, GREY)
        lx = left + plot_w
        for i, s in enumerate(panel.series):
            color = s.color or PALETTE[i % len(PALETTE)]
            pts = [(left + plot_w * x / x_max, y1 - (y1 - y0) * min(y, y_max) / y_max)
                   for x, y in zip(s.xs, s.ys) if math.isfinite(y)]
            if s.points:
                for px, py in pts:
                    c.rect(int(px) - 1, int(py) - 1, int(px) + 1, int(py) + 1, color, fill=True)
            else:
                for (ax, ay), (bx, by) in zip(pts, pts[1:]):
                    c.line(ax, ay, bx, by, color, width=2)
            lx -= c.text_width(s.label) + 22
            c.rect(lx, y0 - 13, lx + 8, y0 - 6, color, fill=True)
            c.text(lx + 12, y0 - 14, s.label, color)
    c.text(left + plot_w - c.text_width(x_label), height - 12, x_label, GREY)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(c.png())
    return out
