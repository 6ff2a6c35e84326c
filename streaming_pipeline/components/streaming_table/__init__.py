from streaming_pipeline.components.streaming_table.component import StreamingTable, streaming_table

__all__ = ["StreamingTable", "streaming_table"]
