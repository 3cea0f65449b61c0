"""What both sensors share: a synchronous check for poke mode and the deferral."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from ..hooks.txn_broker import TxnBrokerHook

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from txn_broker import Broker


class BrokerSensorError(AirflowException):
    """The sensor's trigger reported a broker error."""


class DeferrableBrokerSensor(BaseSensorOperator):
    """Checks once at once; if not done, defers to :meth:`trigger` (``deferrable=True``,
    the default) or pokes every ``poke_interval`` (``deferrable=False``). The XCom value is
    the check's payload."""

    txn_broker_conn_id: str

    def __init__(self, *, deferrable: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable

    def check(self, broker: Broker) -> dict[str, Any] | None:
        raise NotImplementedError

    def trigger(self) -> BaseTrigger:
        raise NotImplementedError

    def _check_now(self) -> dict[str, Any] | None:
        hook = TxnBrokerHook(self.txn_broker_conn_id)
        try:
            return self.check(hook.get_conn())
        finally:
            hook.close()

    def poke(self, context: Context) -> PokeReturnValue:
        payload = self._check_now()
        return PokeReturnValue(is_done=payload is not None, xcom_value=payload)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        payload = self._check_now()
        if payload is not None:
            return payload
        self.defer(trigger=self.trigger(), method_name="execute_complete",
                   timeout=timedelta(seconds=float(self.timeout)))
        return None

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "no event")
            raise BrokerSensorError(f"{self.task_id}: trigger failed: {message}")
        return {k: v for k, v in event.items() if k != "status"}
