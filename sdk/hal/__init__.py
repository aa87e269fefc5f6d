"""The hardware-abstraction layer: the contract a vendor implements, its checks,
and the registry that discovers adapters and opens devices."""

from polyhal.hal.capabilities import PRECISIONS, Capabilities
from polyhal.hal.checked import CheckedDevice
from polyhal.hal.checks import ContractReport, check_adapter_class
from polyhal.hal.contract import (
    API_VERSION,
    Adapter,
    Buffer,
    CompileOptions,
    Device,
    DeviceInfo,
    Executable,
    Profile,
    buffer_checksum,
)
from polyhal.hal.registry import (
    ENTRY_POINT_GROUP,
    PluginFailure,
    adapters,
    discover,
    get_adapter,
    open_device,
    parse_address,
    plugin_failures,
    probe_all,
    register,
    unregister,
)

__all__ = [
    "API_VERSION", "ENTRY_POINT_GROUP", "PRECISIONS", "Adapter", "Buffer", "Capabilities",
    "CheckedDevice", "CompileOptions", "ContractReport", "Device", "DeviceInfo", "Executable",
    "PluginFailure", "Profile", "adapters", "buffer_checksum", "check_adapter_class", "discover",
    "get_adapter", "open_device", "parse_address", "plugin_failures", "probe_all", "register",
    "unregister",
]
