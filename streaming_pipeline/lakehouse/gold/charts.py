"""Pictures for the Dagster UI: trips per window and vendor."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def window_chart_png(windows: pd.DataFrame, title: str = "Trips per window and vendor") -> bytes:
    """Stacked bars of trip_count per window_start, one colour per vendor, late rides on top in grey."""
    figure, axis = plt.subplots(figsize=(10, 4), dpi=100)
    if windows.empty:
        axis.text(0.5, 0.5, "no windows yet", ha="center", va="center", transform=axis.transAxes)
    else:
        frame = windows.copy()
        frame["vendor"] = frame["vendor_id"].map(lambda v: "unknown" if pd.isna(v) else f"vendor {int(v)}")
        pivot = frame.pivot_table(index="window_start", columns="vendor", values="trip_count", aggfunc="sum").fillna(0)
        positions = list(range(len(pivot)))
        bottom = [0.0] * len(pivot)
        for vendor in pivot.columns:
            heights = pivot[vendor].tolist()
            axis.bar(positions, heights, bottom=bottom, width=0.9, label=vendor)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        if "late_trip_count" in frame and frame["late_trip_count"].sum() > 0:
            late = frame.groupby("window_start")["late_trip_count"].sum().reindex(pivot.index).fillna(0)
            axis.bar(positions, late.tolist(), bottom=bottom, width=0.9, color="black", alpha=0.5, label="late")
        step = max(1, len(pivot) // 12)
        axis.set_xticks(positions[::step])
        axis.set_xticklabels(
            [pd.Timestamp(t).strftime("%m-%d %H:%M") for t in pivot.index[::step]], rotation=30, ha="right"
        )
        axis.legend(loc="upper right")
    axis.set_title(title)
    axis.set_xlabel("window start (UTC)")
    axis.set_ylabel("trips")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def png_markdown(png: bytes, alt: str) -> str:
    """Inline PNG as Markdown, which Dagster's metadata panel renders."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
