//! weir-keyed (in progress).
