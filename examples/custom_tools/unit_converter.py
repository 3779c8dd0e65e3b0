"""A user tool with no side effects: unit conversion.

Drop files like this one into a tools directory (default ``.ragstream/tools``, or
``RAGSTREAM_TOOL_DIRS``); the server loads what each file exports in ``TOOLS``.
"""

from rag_tools.tools import tool_options

_TO_METRES = {"m": 1.0, "km": 1000.0, "mi": 1609.344, "ft": 0.3048, "in": 0.0254}


@tool_options(
    tags=("math",), instructions="Use convert_units for unit conversions instead of doing the arithmetic."
)
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a length between units (m, km, mi, ft, in).

    Args:
        value: The amount to convert.
        from_unit: The unit of ``value``.
        to_unit: The unit wanted.
    """
    unknown = [u for u in (from_unit, to_unit) if u not in _TO_METRES]
    if unknown:
        return f"unknown unit(s) {unknown}; known: {sorted(_TO_METRES)}"
    converted = value * _TO_METRES[from_unit] / _TO_METRES[to_unit]
    return f"{value:g} {from_unit} = {converted:.4g} {to_unit}"


TOOLS = [convert_units]
