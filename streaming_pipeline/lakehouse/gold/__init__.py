"""Gold: aggregates of the rides (running counts per vendor, event-time windows with their late rides)."""
