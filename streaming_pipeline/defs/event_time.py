"""The event-time parameter the windows and the join share: one variable, RIDE_WATERMARK_DELAY, one default."""

from typing import Any

from streaming_pipeline.components.parameters import parameter


def watermark_delay_parameter(description: str) -> Any:
    """The `watermark_delay` config field of a step that watermarks on event time, described for that step."""
    return parameter(env="RIDE_WATERMARK_DELAY", default="15 minutes", kind="interval", description=description)
