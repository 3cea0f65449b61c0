"""AddPartitionsToTxn in the background, as Kafka's producer sends it.

A transaction's first send to a partition must add the partition to the transaction at the
coordinator: the first add opens the transaction and starts its timeout clock. Made in the
caller's thread, that round trip (one durable database commit) sat on the critical path of
every small transaction, before its records were even encoded. Here it is sent from one
background thread per producer while the caller goes on (buffering, encoding, uploading),
and its outcome is collected by the producer's next call: the next ``send()`` raises a
failure that has arrived; ``flush()``, ``commit_transaction()``,
``send_offsets_to_transaction()`` and ``transaction_handle()`` wait for every add in flight
first and raise the first failure (docs/semantics.md, "Errors at the next call").

Adds run one at a time, in the order they were sent, so the transaction they open is the
one every later add joins.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import TxnBrokerError
from .accumulator import BufferKey


@dataclass
class AddOutcome:
    """What the adds collected by one :meth:`PartitionAdder.collect` came to."""

    #: the transaction the successful adds opened or joined; None if none succeeded
    txn_id: int | None = None
    #: the first failure, in the order the adds were sent; None if all succeeded
    error: TxnBrokerError | None = None
    #: the partitions of the adds that failed (not known to be in the transaction)
    failed: list[BufferKey] = field(default_factory=list)


class PartitionAdder:
    """One producer's AddPartitionsToTxn requests in flight (not thread-safe: the
    producer calls it under its own lock)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: list[tuple[Future[int], list[BufferKey]]] = []

    @property
    def busy(self) -> bool:
        """Whether an add was sent and its outcome not collected yet."""
        return bool(self._inflight)

    def submit(self, add: Callable[[], int], partitions: list[BufferKey]) -> None:
        """Send ``add`` (AddPartitionsToTxn for ``partitions``, with the producer's retries;
        returns the transaction's id) after every add sent before it."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, "txn-broker-add-partitions")
        self._inflight.append((self._pool.submit(add), list(partitions)))

    def collect(self, *, wait: bool) -> AddOutcome:
        """The outcome of the adds that finished (``wait``: of every add sent, waiting for
        them), which are then forgotten. Errors other than the broker's own (a bug) are
        raised as they are."""
        outcome = AddOutcome()
        still: list[tuple[Future[int], list[BufferKey]]] = []
        unexpected: BaseException | None = None
        for future, partitions in self._inflight:
            if not wait and not future.done():
                still.append((future, partitions))
                continue
            error = future.exception()
            if error is None:
                outcome.txn_id = future.result()
                continue
            outcome.failed.extend(partitions)
            if isinstance(error, TxnBrokerError):
                outcome.error = outcome.error or error
            else:
                unexpected = unexpected or error
        self._inflight = still
        if unexpected is not None:
            raise unexpected
        return outcome

    def close(self) -> None:
        """Wait for the adds in flight (their outcome no longer matters) and stop the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._inflight = []
