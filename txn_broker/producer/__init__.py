"""The producer, split as aiokafka's is:

* :mod:`.client`: :class:`Producer`, the client API (sends, flushes, transactions);
* :mod:`.accumulator`: records buffered per partition, and the partitioner;
* :mod:`.sender`: buffers numbered, built into segments, uploaded and registered;
* :mod:`.state`: the producer's state machine.
"""

from .client import Producer
from .state import ProducerState

__all__ = ["Producer", "ProducerState"]
