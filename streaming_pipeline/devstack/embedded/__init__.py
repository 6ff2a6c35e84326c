"""The embedded stack: a real Kafka broker (KRaft, from its Maven Central jars) and the schema registry,
run as background processes on 127.0.0.1 with their data kept in a local directory.

- :mod:`streaming_pipeline.lakehouse.engine.jars`: every Java artifact, resolved once
  (``streaming-pipeline jars fetch``)
- :class:`EmbeddedKafkaBroker`, :class:`SchemaRegistryProcess`: one process each
- :class:`EmbeddedStack`, :func:`running_stack`: both together under one directory
- :mod:`streaming_pipeline.devstack.embedded.stack_cli`: ``streaming-pipeline stack up|down|status|env``
"""

from streaming_pipeline.devstack.embedded.kafka_broker import EmbeddedKafkaBroker
from streaming_pipeline.devstack.embedded.registry_process import SchemaRegistryProcess
from streaming_pipeline.devstack.embedded.stack import (
    ComponentStatus,
    EmbeddedStack,
    StackInfo,
    StackStatus,
    default_stack_dir,
    running_stack,
)
from streaming_pipeline.lakehouse.engine.jars import KAFKA_VERSION

__all__ = [
    "KAFKA_VERSION",
    "ComponentStatus",
    "EmbeddedKafkaBroker",
    "EmbeddedStack",
    "SchemaRegistryProcess",
    "StackInfo",
    "StackStatus",
    "default_stack_dir",
    "running_stack",
]
