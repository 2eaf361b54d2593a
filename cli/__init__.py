"""The ``amqpscope`` command line (installed as ``amqpscope.cli``)."""
