"""Silver: streams from bronze into cleaned, branched, enriched and joined tables."""
