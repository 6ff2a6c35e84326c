"""The development stack: the embedded servers, the schema registry, the command line, the demo, the bench, the
producer and replay. Nothing a deployment's code location imports (`pip install .[stack]`)."""
