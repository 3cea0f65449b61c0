"""The polling loop both triggers share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from txn_broker.errors import TxnBrokerError

if TYPE_CHECKING:
    from txn_broker import Broker


class BrokerPollingTrigger(BaseTrigger):
    """Calls :meth:`check` (synchronous broker calls, in a thread so the triggerer's event
    loop never blocks) every ``poll_interval`` seconds until it returns a payload, then
    fires one event ``{"status": "success", ...payload}``. Transient (retriable) broker
    errors are logged and polled through; any other error fires
    ``{"status": "error", "message": ...}``. Each run is independent, so a trigger that
    the triggerer restarts (it may run more than once) simply starts polling again."""

    def __init__(self, txn_broker_conn_id: str, poll_interval: float = 5.0) -> None:
        super().__init__()
        self.txn_broker_conn_id = txn_broker_conn_id
        self.poll_interval = float(poll_interval)

    def check(self, broker: Broker) -> dict[str, Any] | None:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from ..hooks.txn_broker import TxnBrokerHook

        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            while True:
                try:
                    broker = await asyncio.to_thread(hook.get_conn)
                    payload = await asyncio.to_thread(self.check, broker)
                except TxnBrokerError as error:
                    if not error.retriable:
                        yield TriggerEvent({"status": "error", "message": f"{type(error).__name__}: {error}"})
                        return
                    self.log.warning("transient broker error, polling on: %s", error)
                    payload = None
                if payload is not None:
                    yield TriggerEvent({"status": "success", **payload})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(hook.close)
