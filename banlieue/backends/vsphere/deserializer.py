"""pyVmomi's SOAP response deserializer without its reference cycle.

``SoapResponseDeserializer.Deserialize`` keeps the expat parser in ``self.parser``, and the
parser's handlers are bound methods of that deserializer: a cycle. The deserializer also holds
the inner ``SoapDeserializer``, whose ``result`` is the whole response (every ``ObjectContent``,
``DynamicProperty``, ``OptionValue``, device...). So each response outlived its use until the
garbage collector's next collection of the generation the cycle had reached; a large response
allocates enough objects while it is parsed to reach the oldest generation, which CPython
collects rarely once the process holds many long-lived objects (the informer caches), and the
allocator keeps the high-water mark of what piled up as RSS. Measured with
``bench/e2e_memprobe.py`` (gc.DEBUG_SAVEALL) on ``banlieue manager`` restarting onto 1,000 Ready
VMs: 206,790 objects went through such cycles, nearly all pyVmomi response objects (every
response of the run); with this module, 2,503 (import-time objects only), and RSS after
settling 135 -> 128 MiB.

:func:`install` makes pyVmomi use a subclass that drops ``self.parser`` once the response is
parsed (pyVmomi itself does so only for faults), so reference counting frees a response as
soon as its caller lets go of the result. Nothing else changes, except for a stub marked with
``LEAN_UPDATE_SETS`` (the change watch's own stub): its ``UpdateSet`` responses are read by
``updateset.read_update_set`` instead (streamed, only what the watch uses; see that module).
"""

from __future__ import annotations

from typing import Any

from pyVmomi import SoapAdapter as _soap
from pyVmomi import vmodl as _vmodl

from banlieue.backends.vsphere import updateset

soap: Any = _soap  # pyVmomi's partial stubs: treat the module as Any
UPDATE_SET: Any = _vmodl.query.PropertyCollector.UpdateSet
LEAN_UPDATE_SETS = "banlieue_lean_update_sets"
"""Stub attribute: set it to the extraConfig key to keep (``find.UID_KEY``) to have the stub's
``UpdateSet`` responses read by ``updateset.read_update_set``."""


class AcyclicResponseDeserializer(soap.SoapResponseDeserializer):  # type: ignore[misc]
    """``SoapResponseDeserializer`` that forgets its parser after ``Deserialize`` (see module)."""

    def Deserialize(self, response: Any, resultType: Any, nsMap: Any = None) -> Any:  # pyVmomi's method name
        uid_key = getattr(self.stub, LEAN_UPDATE_SETS, None)
        if uid_key and resultType is UPDATE_SET and hasattr(response, "read"):
            return updateset.read_update_set(response.read, uid_key,
                                             lambda body: self.Deserialize(body, resultType, nsMap))
        try:
            return super().Deserialize(response, resultType, nsMap)
        finally:
            self.__dict__.pop("parser", None)


def install() -> None:
    """Make pyVmomi's SOAP stubs deserialize responses with :class:`AcyclicResponseDeserializer`
    (``SoapStubAdapter.InvokeMethod`` looks the class up in its module at each call).
    Idempotent."""
    if soap.SoapResponseDeserializer is not AcyclicResponseDeserializer:
        soap.SoapResponseDeserializer = AcyclicResponseDeserializer
