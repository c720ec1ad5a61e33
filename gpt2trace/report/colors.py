"""Colors that mean the same in every report: Paraver's state palette, and a fixed color per kernel, phase and
MPI call name.

Known names get hand-picked colors (a kernel family has one hue: `_forward` dark, `_backward` light, as the
Tableau 20 pairs); any other name gets a color from a hash of its UTF-8 bytes (crc32, not Python's salted
`hash`), so the same name has the same color in every report and every run.
"""
from __future__ import annotations

import zlib

from gpt2trace.format.mpi_calls import CALLS
from gpt2trace.format.schema import STATE_COLORS, STATE_NAMES, Phase, State

# Paraver's default STATES_COLOR (the .pcf Extrae writes), by state id.
PARAVER_STATE_RGB = STATE_COLORS

# Tableau 20 as (dark, light) pairs: one hue per kernel family.
FAMILIES = (
    ((31, 119, 180), (174, 199, 232)),   # blue
    ((255, 127, 14), (255, 187, 120)),   # orange
    ((44, 160, 44), (152, 223, 138)),    # green
    ((214, 39, 40), (255, 152, 150)),    # red
    ((148, 103, 189), (197, 176, 213)),  # purple
    ((140, 86, 75), (196, 156, 148)),    # brown
    ((227, 119, 194), (247, 182, 210)),  # pink
    ((127, 127, 127), (199, 199, 199)),  # gray
    ((188, 189, 34), (219, 219, 141)),   # olive
    ((23, 190, 207), (158, 218, 229)),   # cyan
)
_KERNEL_FAMILY = {"matmul": 0, "attention": 1, "gelu": 2, "crossentropy": 3, "layernorm": 4, "residual": 5,
                  "encoder": 6, "zero_fill": 7, "adamw": 8, "adamw_update": 8, "grad_norm_squared": 9}

PHASE_RGB = {Phase.DATALOAD: (172, 174, 41), Phase.FORWARD: (31, 119, 180), Phase.BACKWARD: (255, 127, 14),
             Phase.GRAD_SYNC: (214, 39, 40), Phase.OPTIMIZER: (44, 160, 44), Phase.CHECKPOINT: (140, 86, 75),
             Phase.TRACE_FLUSH: (160, 160, 160)}

# MPI calls: each call's record has its color (gpt2trace/format/mpi_calls.py); a foreign trace's name without a
# record (MPI_Comm_rank) gets a hashed one.
MPI_RGB = {name: c.rgb for name, c in CALLS.items()}

# Fallback palette for names without a fixed color (Tableau 20, then darker variants).
PALETTE = tuple(c for pair in FAMILIES for c in pair)

# Lines of the ranks (occupancy): plotly's default colorway, by rank index.
RANK_RGB = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
            (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207))

STEP_RGB = ((210, 210, 210), (175, 175, 175))     # alternating shades of consecutive steps


def hex_color(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def hashed(name: str, palette: tuple = PALETTE) -> tuple[int, int, int]:
    """A palette entry chosen by crc32 of the name: the same in every process and report."""
    return palette[zlib.crc32(name.encode("utf-8")) % len(palette)]


def state_color(state_id: int) -> str:
    rgb = PARAVER_STATE_RGB.get(state_id)
    return hex_color(rgb if rgb is not None else hashed(f"state {state_id}"))


def state_name(state_id: int) -> str:
    try:
        return STATE_NAMES[State(state_id)]
    except ValueError:
        return f"State {state_id}"


def kernel_color(name: str) -> str:
    """Forward kernels take the dark shade of their family, backward ones the light shade."""
    base, light = name, False
    for suffix, is_light in (("_forward", False), ("_backward", True)):
        if name.endswith(suffix):
            base, light = name[: -len(suffix)], is_light
            break
    family = _KERNEL_FAMILY.get(base)
    pair = FAMILIES[family] if family is not None else FAMILIES[zlib.crc32(base.encode("utf-8")) % len(FAMILIES)]
    return hex_color(pair[1] if light else pair[0])


def phase_color(name: str) -> str:
    return hex_color(PHASE_RGB.get(name) or hashed(name))


def mpi_color(name: str) -> str:
    return hex_color(MPI_RGB.get(name) or hashed(name))


def rank_color(index: int) -> str:
    return hex_color(RANK_RGB[index % len(RANK_RGB)])


def text_color(background: str) -> str:
    """Black or white, whichever reads better on the background (WCAG relative luminance)."""
    r, g, b = (int(background[i:i + 2], 16) / 255 for i in (1, 3, 5))
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "#000000" if lum > 0.179 else "#ffffff"
