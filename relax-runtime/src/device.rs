//! Where tensors live and where a model runs.

use crate::sys;

/// The kind of a device, as DLPack numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// An NVIDIA GPU.
    Cuda,
    /// A Vulkan device.
    Vulkan,
    /// An Apple GPU.
    Metal,
    /// Any other DLPack device type, by its number.
    Other(u32),
}

impl DeviceKind {
    pub(crate) fn to_dlpack(self) -> sys::DLDeviceType {
        match self {
            DeviceKind::Cpu => sys::DLDeviceType_kDLCPU,
            DeviceKind::Cuda => sys::DLDeviceType_kDLCUDA,
            DeviceKind::Vulkan => sys::DLDeviceType_kDLVulkan,
            DeviceKind::Metal => sys::DLDeviceType_kDLMetal,
            DeviceKind::Other(code) => code,
        }
    }

    pub(crate) fn from_dlpack(code: sys::DLDeviceType) -> Self {
        match code {
            sys::DLDeviceType_kDLCPU => DeviceKind::Cpu,
            sys::DLDeviceType_kDLCUDA => DeviceKind::Cuda,
            sys::DLDeviceType_kDLVulkan => DeviceKind::Vulkan,
            sys::DLDeviceType_kDLMetal => DeviceKind::Metal,
            other => DeviceKind::Other(other),
        }
    }
}

/// A device: a kind and an index among devices of that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// The kind of device.
    pub kind: DeviceKind,
    /// Its index among the devices of its kind.
    pub id: i32,
}

impl Device {
    /// The host CPU.
    pub const fn cpu() -> Self {
        Device {
            kind: DeviceKind::Cpu,
            id: 0,
        }
    }

    pub(crate) fn to_dlpack(self) -> sys::DLDevice {
        sys::DLDevice {
            device_type: self.kind.to_dlpack(),
            device_id: self.id,
        }
    }

    pub(crate) fn from_dlpack(device: sys::DLDevice) -> Self {
        Device {
            kind: DeviceKind::from_dlpack(device.device_type),
            id: device.device_id,
        }
    }
}

impl Default for Device {
    fn default() -> Self {
        Device::cpu()
    }
}
