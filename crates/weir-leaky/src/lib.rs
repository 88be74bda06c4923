//! weir-leaky (in progress).
