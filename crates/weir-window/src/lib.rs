//! weir-window (in progress).
