//! Broker tests without the kernel.
